"""Durable results: a table of scored designs (and answered sweep questions) in a database,
keyed by a content hash, so a killed search or sweep resumes and re-uses what was done.

`ResultStore(url_or_path)` opens a SQLite file (a path: embedded, nothing to start) or any
SQLAlchemy URL (`postgresql://user@host/db`: several machines share it). The same
database holds the optuna studies of the search (`optuna_storage`).

A key is the SHA-256 of everything a result depends on: the design, the trace (its
arrays), the model, the latency model (class, calibration constants, measured profile),
the catalog (every machine's price and power), the SLO, the engine and its options, and
the code version (a hash of the source of the packages that compute results). Values
are JSON (floats round-trip exactly; NaN and inf included). Writes are single
transactions, so a SIGKILL at any point leaves every row whole or absent.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import time
from importlib import resources
from pathlib import Path

from .errors import ProvisionerError
from .files import resolved

__all__ = ["ResultStore", "open_store", "refuse_foreign_study", "code_version", "digest", "trace_digest", "latency_model_digest"]

TABLE = "provisioner_results"
_SOURCE_PACKAGES = ("provisioner", "perfmodels", "workloads", "hardware_catalog")
_SQLITE_TIMEOUT_S = 120     # concurrent writers (sweep workers) wait rather than fail


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """SHA-256 of the source and data files of the packages that compute results
    (the CLI and reports included: cheap, and never stale)."""
    h = hashlib.sha256()
    for package in _SOURCE_PACKAGES:
        root = Path(str(resources.files(package)))
        for path in sorted(root.rglob("*")):
            if path.suffix in (".py", ".toml", ".csv", ".md") and "__pycache__" not in path.parts:
                h.update(str(path.relative_to(root)).encode())
                h.update(path.read_bytes())
    return h.hexdigest()


def digest(*parts) -> str:
    """SHA-256 of the canonical JSON of `parts` (numbers exactly, via repr)."""
    text = json.dumps(parts, sort_keys=True, default=repr, allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


def trace_digest(trace) -> str:
    """SHA-256 of a trace's arrays and window."""
    h = hashlib.sha256()
    for arr in (trace.arrival_s, trace.prompt_tokens, trace.output_tokens):
        h.update(str(arr.dtype).encode())
        h.update(arr.tobytes())
    h.update(repr(float(trace.duration_s)).encode())
    return h.hexdigest()


def latency_model_digest(perf) -> str:
    """SHA-256 of what a latency model answers from: its class, constants, profile, catalog."""
    describe = perf.describe() if hasattr(perf, "describe") else None
    return digest(type(perf).__qualname__, repr(perf.calibration), describe, repr(perf.catalog))


def _url(location: str) -> str:
    text = str(location)
    if not text.strip():
        raise ProvisionerError("study is empty: give a SQLite file such as plans.db or a URL such as "
                               "postgresql://user@host/db", params=("study",))
    if re.match(r"sqlite(\+\w+)?:", text):   # a SQLite URL (any driver), not a file named sqlite...
        return _sqlite_url(text)
    if "://" in text:
        return text
    path = Path(text).expanduser()
    if path.is_dir():
        raise ProvisionerError(f"study '{text}' is a directory; give a database file such as {path / 'plans.db'} "
                               f"or a URL such as postgresql://user@host/db", params=("study",))
    if not path.parent.is_dir():
        raise ProvisionerError(f"study '{text}': directory '{path.parent}' does not exist; create it first",
                               params=("study",))
    return f"sqlite:///{resolved(path, 'study', params=('study',))}"


def _sqlite_url(url: str) -> str:
    """A SQLite URL whose file's directory exists, or one line on the slash count, the usual
    slip: `sqlite:///` is followed by a relative path, `sqlite:////` by an absolute one."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    form = "sqlite:/// then the file's path (sqlite:///plans.db; absolute: sqlite:////srv/plans.db)"
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ProvisionerError(f"study '{url}' is not a database URL: write {form}, or give the file's path alone",
                               params=("study",)) from None
    file = parsed.database or ""
    if parsed.get_backend_name() != "sqlite":
        return url
    if parsed.host:   # sqlite://plans.db: the file read as a host
        raise ProvisionerError(f"study '{url}' names no file: write {form}, or give the file's path alone",
                               params=("study",))
    if file in ("", ":memory:"):   # an in-memory database
        return url
    if file.startswith("file:") or parsed.query.get("uri"):   # a SQLite URI: the driver parses it
        return url
    parent = Path(file).parent
    if not parent.is_dir():
        fix = ("~ is not expanded in a URL: write the home directory out" if file.startswith("~")
               else "an absolute path takes four slashes (sqlite:////...)" if not file.startswith("/")
               else "create it first")
        raise ProvisionerError(f"study '{url}': directory '{parent}' does not exist (the URL's path is "
                               f"{'absolute' if file.startswith('/') else 'relative to here'}); {fix}",
                               params=("study",))
    return url


def sqlite_file(location) -> Path | None:
    """The file a study location names: a path, or a `sqlite:///` URL's file (relative after
    three slashes, absolute after four); None for another database's URL, an in-memory
    SQLite or an empty location.

    >>> str(sqlite_file("sqlite:///runs/study.db")), str(sqlite_file("sqlite+pysqlite:////tmp/s.db"))
    ('runs/study.db', '/tmp/s.db')
    """
    text = str(location).strip()
    if not text:
        return None
    if "://" not in text:
        return Path(text).expanduser()
    scheme, _, rest = text.partition("://")
    # `sqlite+pysqlite:///f.db` (a driver named) is the same file as `sqlite:///f.db`.
    if scheme.split("+", 1)[0].lower() != "sqlite" or not rest.startswith("/"):
        return None
    name = rest[1:].split("?", 1)[0]
    return Path(name).expanduser() if name and name != ":memory:" else None


def refuse_foreign_study(location) -> None:
    """Refuse a study path naming an existing file that is not a study: a study adds
    tables, and another file of the user's is not ours to change. An empty file or SQLite
    database holds nothing to lose, and is what a run killed as it created its study
    leaves: taken. Checked where the user names it (the CLI)."""
    import sqlite3

    text = str(location)
    path = sqlite_file(text)
    if path is None or not path.is_file():
        return
    with open(path, "rb") as stream:
        header = stream.read(16)
    if not header:
        return
    if header != b"SQLite format 3\x00":
        raise ProvisionerError(f"study '{text}' exists and is not a SQLite database, so not one a run of provision "
                               f"made; give a new file name (it is created) or one an earlier run made",
                               params=("study",))
    try:
        with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as conn:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error as exc:
        raise ProvisionerError(f"cannot open the study '{text}': {exc}; give a new file name or one an earlier "
                               f"run of provision made", params=("study",)) from None
    if tables and TABLE not in tables:
        shown = ", ".join(sorted(tables)[:3]) + (", ..." if len(tables) > 3 else "")
        raise ProvisionerError(f"study '{text}' is another application's SQLite database (tables {shown}); give a "
                               f"new file name (it is created) or one an earlier run of provision made",
                               params=("study",))


class ResultStore:
    """Results by content hash in one database (SQLite file or SQLAlchemy URL)."""

    def __init__(self, location: str):
        self.location = str(location)
        self.url = _url(self.location)
        self._engine = None
        self._table = None
        self._optuna = None

    def __reduce__(self):   # workers reopen the database; engines do not pickle
        return (ResultStore, (self.location,))

    @property
    def optuna_storage(self):
        """An optuna RDBStorage on the same database (made once per store)."""
        if self._optuna is None:
            import optuna
            self._open()   # a database that cannot be opened is the user's one-line error here
            kwargs = {"connect_args": {"timeout": _SQLITE_TIMEOUT_S}} if self.url.startswith("sqlite") else {}
            self._optuna = _creating_schema(lambda: optuna.storages.RDBStorage(self.url, engine_kwargs=kwargs))
        return self._optuna

    def _open(self):
        if self._engine is not None:
            return
        import sqlalchemy as sa
        kwargs = {"connect_args": {"timeout": _SQLITE_TIMEOUT_S}} if self.url.startswith("sqlite") else {}
        try:
            engine = sa.create_engine(self.url, **kwargs)
            meta = sa.MetaData()
            table = sa.Table(TABLE, meta, sa.Column("key", sa.String(64), primary_key=True),
                             sa.Column("kind", sa.String(32), nullable=False),
                             sa.Column("value", sa.Text, nullable=False))
            if self.url.startswith("sqlite"):
                with engine.begin() as conn:   # readers do not block the writer
                    conn.exec_driver_sql("PRAGMA journal_mode=WAL")
            _creating_schema(lambda: meta.create_all(engine, checkfirst=True))
        except Exception as exc:  # noqa: BLE001 - any driver's connection error is the user's to fix
            if isinstance(exc, ProvisionerError):
                raise
            raise ProvisionerError(f"cannot open the study '{self.location}': {str(exc).splitlines()[0][:200]}; "
                                   f"give a writable SQLite file or a reachable database URL",
                                   params=("study",)) from None
        self._engine, self._table = engine, table

    def get_many(self, keys: list[str]) -> dict[str, object]:
        """The stored values of those `keys` that are stored."""
        if not keys:
            return {}
        self._open()
        import sqlalchemy as sa
        out = {}
        with self._engine.connect() as conn:
            for start in range(0, len(keys), 500):
                chunk = keys[start:start + 500]
                rows = conn.execute(sa.select(self._table.c.key, self._table.c.value)
                                    .where(self._table.c.key.in_(chunk)))
                out.update({k: json.loads(v) for k, v in rows})
        return out

    def get(self, key: str):
        return self.get_many([key]).get(key)

    def put_many(self, kind: str, items: dict[str, object]) -> None:
        """Store `items` (key -> JSON-able value) in one transaction; existing keys are kept."""
        if not items:
            return
        self._open()
        dialect = self._engine.dialect.name
        if dialect == "sqlite":
            from sqlalchemy.dialects.sqlite import insert
        elif dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            raise ProvisionerError(f"study database '{dialect}' is not supported: use a SQLite file or "
                                   f"postgresql://", params=("study",))
        rows = [{"key": k, "kind": kind, "value": json.dumps(_plain(v), allow_nan=True)} for k, v in items.items()]
        with self._engine.begin() as conn:
            conn.execute(insert(self._table).on_conflict_do_nothing(index_elements=["key"]), rows)

    def count(self, kind: str | None = None) -> int:
        self._open()
        import sqlalchemy as sa
        query = sa.select(sa.func.count()).select_from(self._table)
        if kind is not None:
            query = query.where(self._table.c.kind == kind)
        with self._engine.connect() as conn:
            return int(conn.execute(query).scalar_one())


def _creating_schema(create, attempts: int = 5):
    """`create()` (tables, indexes), retried when another process creates them at the same
    time: PostgreSQL's CREATE TABLE is not idempotent under a race (checkfirst then
    create), so the loser sees a unique violation and the next try finds the tables."""
    import sqlalchemy.exc as sa_exc
    for attempt in range(attempts):
        try:
            return create()
        except (sa_exc.IntegrityError, sa_exc.ProgrammingError, sa_exc.OperationalError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1))


def open_store(location) -> ResultStore | None:
    """A `ResultStore` for a path or URL (None for None)."""
    if location is None or isinstance(location, ResultStore):
        return location
    return ResultStore(location)


def _plain(value):
    """JSON-able Python values of numpy scalars and containers (floats exactly, NaN and inf kept)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return value.item()
    return value
