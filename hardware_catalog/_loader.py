"""Load and validate a catalog: one TOML file per GPU, machine and model.

A catalog root holds ``gpus/``, ``machines/`` and ``models/``; an entry's name is its
file name without ``.toml``. Every problem raises CatalogValidationError with one line
naming the file, the field and the fix.
"""

import functools
import math
import os
import re
import tomllib
import types
from dataclasses import Field, fields
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, get_args, get_origin

from ._schema import GPU, LLM, Catalog, Machine
from ._text import decode_text
from .errors import CatalogValidationError, close_matches, unknown_name_message

PARAMS_TOLERANCE = 0.05
"""Largest relative gap between architecture-derived and published parameter counts."""

_NAME = re.compile(r"[a-z0-9][a-z0-9.-]*")
_TYPE_TEXT = {float: "a finite number", int: "an integer", str: "a string", bool: "true or false",
              dict[str, str]: "a table of strings", dict[str, float]: "a table of numbers"}


def load_catalog(root: str | os.PathLike | None = None) -> Catalog:
    """Load the catalog under ``root`` (a directory with gpus/, machines/ and models/).

    Without ``root``, the catalog shipped with the package, loaded once and cached.
    Raises CatalogValidationError for any malformed file.
    """
    if root is None:
        return _default_catalog()
    root = Path(root)
    if not root.is_dir():
        raise CatalogValidationError(f"{root}: catalog root is not a directory")
    return _load_tree(root)


@functools.lru_cache(maxsize=1)
def _default_catalog() -> Catalog:
    return _load_tree(resources.files("hardware_catalog") / "data")


def _load_tree(root: Traversable) -> Catalog:
    gpus = {name: GPU(name=name, **_fields(GPU, rel, raw)) for name, rel, raw in _entries(root, "gpus")}
    machines = {name: _machine(name, rel, raw, gpus) for name, rel, raw in _entries(root, "machines")}
    models = {name: _model(name, rel, raw) for name, rel, raw in _entries(root, "models")}
    return Catalog(gpus=gpus, machines=machines, models=models)


def _entries(root: Traversable, subdir: str) -> list[tuple[str, str, dict]]:
    """(name, relative path, parsed TOML) of every ``*.toml`` in ``root/subdir``, by name."""
    folder = root / subdir
    if not folder.is_dir():
        raise CatalogValidationError(
            f"{root}: missing directory '{subdir}/' (a catalog root holds gpus/, machines/ and models/)")
    files = [f for f in folder.iterdir() if f.name.endswith(".toml")]
    return sorted((_read(f, subdir) for f in files), key=lambda entry: entry[0])


def _read(file: Traversable, subdir: str) -> tuple[str, str, dict]:
    rel, name = f"{subdir}/{file.name}", file.name.removesuffix(".toml")
    if not _NAME.fullmatch(name):
        raise CatalogValidationError(
            f"{rel}: file name must be lowercase letters, digits, '-' or '.' (e.g. 'h100-80gb.toml')")
    try:   # a BOM (Notepad) or UTF-16 (PowerShell's `>`) reads as written, as every file a user gives
        return name, rel, tomllib.loads(decode_text(file.read_bytes(), universal_newlines=True))
    except UnicodeDecodeError:   # before ValueError, which it is
        raise CatalogValidationError(f"{rel}: not UTF-8 or UTF-16 text; save it as a UTF-8 TOML file") from None
    except tomllib.TOMLDecodeError as err:
        raise CatalogValidationError(f"{rel}: not valid TOML: {err}") from None
    except ValueError:   # Python refuses to read an integer of over 4,300 digits
        raise CatalogValidationError(f"{rel}: a number has over 4,300 digits; give a real value") from None


def _machine(name: str, rel: str, raw: dict, gpus: dict) -> Machine:
    values = _fields(Machine, rel, raw)
    if values["gpu"] not in gpus:
        raise CatalogValidationError(f"{rel}: field 'gpu': {unknown_name_message('gpu', values['gpu'], gpus)}")
    options, default = values["cost_options_usd_per_h"], values["default_cost_option"]
    if default not in options:
        raise CatalogValidationError(
            f"{rel}: field 'default_cost_option' must be a label of cost_options_usd_per_h "
            f"({', '.join(map(repr, options))}) (got {default!r})")
    return Machine(name=name, cost_usd_per_h=options[default], **values)


def _model(name: str, rel: str, raw: dict) -> LLM:
    llm = LLM(name=name, **_fields(LLM, rel, raw))
    if llm.hidden_size % llm.n_heads:
        raise CatalogValidationError(
            f"{rel}: field 'n_heads' must divide hidden_size {llm.hidden_size} (got {llm.n_heads})")
    if llm.n_heads % llm.n_kv_heads:
        raise CatalogValidationError(
            f"{rel}: field 'n_kv_heads' must divide n_heads {llm.n_heads} (got {llm.n_kv_heads})")
    gap = llm.params / llm.published_params - 1
    if abs(gap) > PARAMS_TOLERANCE:
        raise CatalogValidationError(
            f"{rel}: field 'published_params' is {llm.published_params / 1e9:.2f}e9 but the architecture gives "
            f"{llm.params / 1e9:.2f}e9 ({gap:+.1%}, tolerance {PARAMS_TOLERANCE:.0%}); check n_layers, hidden_size, "
            f"n_heads, n_kv_heads, ffn_size, ffn_type, vocab_size and tied_embeddings")
    return llm


def _fields(cls: type, rel: str, raw: dict) -> dict[str, Any]:
    """The file's values for ``cls``, type-checked, coerced and checked against each field's rule."""
    specs = {f.name: f for f in fields(cls) if "derived" not in f.metadata}
    for key in raw:
        if key not in specs:
            raise CatalogValidationError(_unexpected_field(cls, rel, key, specs))
    values = {}
    for name, spec in specs.items():
        tp, optional = _strip_none(spec.type)
        if name not in raw and not optional:
            raise CatalogValidationError(f"{rel}: missing field {name!r}; add it ({_TYPE_TEXT[tp]})")
        values[name] = _value(rel, name, raw[name], tp, spec) if name in raw else None
    _check_sources(cls, rel, values)
    return values


def _unexpected_field(cls: type, rel: str, key: str, specs: dict[str, Field]) -> str:
    derived = {f.name: f.metadata["derived"] for f in fields(cls) if "derived" in f.metadata}
    if key in derived:
        return f"{rel}: field {key!r} is taken from {derived[key]}; remove it"
    hint = " or ".join(map(repr, close_matches(key, specs)))
    hint = f" — did you mean {hint}?" if hint else "; remove it or fix its name."
    return f"{rel}: unknown field {key!r}{hint} Allowed: {', '.join(specs)}"


def _strip_none(tp: Any) -> tuple[Any, bool]:
    """(type without None, whether None was allowed): ``float | None`` -> (float, True)."""
    if isinstance(tp, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        return args[0], len(args) < len(get_args(tp))
    return tp, False


def _value(rel: str, name: str, raw: Any, tp: Any, spec: Field) -> Any:
    shown = repr(raw) if len(repr(raw)) <= 60 else repr(raw)[:57] + "..."
    try:
        value = _coerce(raw, tp)
    except TypeError:
        raise CatalogValidationError(
            f"{rel}: field {name!r} must be {_TYPE_TEXT[tp]} (got {type(raw).__name__} {shown})") from None
    if "rule" in spec.metadata:
        text, ok = spec.metadata["rule"]
        if not ok(value):
            raise CatalogValidationError(f"{rel}: field {name!r} must be {text} (got {shown})")
    return value


def _coerce(value: Any, tp: Any) -> Any:
    """``value`` as ``tp`` (ints widen to float; no other conversion), else TypeError."""
    if tp is float and type(value) in (int, float) and math.isfinite(value):
        return float(value)
    if tp in (int, str, bool) and type(value) is tp:
        return value
    if get_origin(tp) is dict and isinstance(value, dict):
        return {key: _coerce(item, get_args(tp)[1]) for key, item in value.items()}
    raise TypeError(tp)


def _check_sources(cls: type, rel: str, values: dict[str, Any]) -> None:
    """Sources keys are field names or "*"; without "*", every number needs its own source."""
    sources, names = values["sources"], [f.name for f in fields(cls)]
    for key in sources:
        if key != "*" and key not in names:
            hint = " or ".join(map(repr, close_matches(key, names))) or "a field name"
            raise CatalogValidationError(f"{rel}: sources key {key!r} is not a field; use {hint} or '*'")
    if "*" in sources:
        return
    for name, value in values.items():
        numeric = type(value) in (int, float) or (isinstance(value, dict) and name != "sources")
        if numeric and name not in sources:
            raise CatalogValidationError(
                f"{rel}: field {name!r} has no source; add {name} = \"<citation>\" under [sources]")
