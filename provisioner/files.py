"""The one way the provisioner writes a file: atomically, never over its own input, never
over an existing file without `force` (the one refuse-to-overwrite rule).

Every writer (reports, `perf predict`, `perf calibrate`, `perf plot`) goes through
`write_output`, so a full disk, a read-only directory or a killed run never leaves a
half-written file behind, and an error is one line that names the path and the fix.
`flag` and `force_hint` are how the caller's user knows the path and the override: the
library's parameter names by default, the CLI's flags (e.g. "--out", "--force") there.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import importlib.util
import os
import stat
import sys
import tempfile
from pathlib import Path

from .errors import ProvisionerError

__all__ = ["check_output_path", "write_output", "os_error_line", "refuse_shipped", "resolved", "stdout_is_an_output",
           "forget_outputs", "check_path_length", "long_name_part", "NAME_MAX_BYTES", "refuse_folder_name"]

_PATH_MAX = 4096   # Linux's PATH_MAX (bytes, with the final NUL)
NAME_MAX_BYTES = 255   # the longest file name (one part of a path) a file system allows

# Whether an output this command checked is its own standard output (`--report /dev/stdout >
# f.html`): then the command's text summary goes to standard error, not into that file.
_stdout_is_an_output = False


def stdout_is_an_output() -> bool:
    """An output path checked since `forget_outputs` is this process's standard output."""
    return _stdout_is_an_output


def forget_outputs() -> None:
    """A new command: no output of it checked yet (`provision` calls it at each run)."""
    global _stdout_is_an_output
    _stdout_is_an_output = False


def _file_mode(path: Path) -> int:
    """The permissions a written file gets: those of the file it replaces, else what
    `open` would give a new file under the umask (the temporary file is 0600)."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    """The process's umask: read from /proc (Linux), else set and put back (os.umask has no
    read-only form; the moment between is not thread-safe)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def os_error_line(exc: OSError, path) -> str:
    """One line for an OSError while writing `path`, with the usual fix."""
    why = exc.strerror or str(exc)
    fix = {errno.ENOSPC: "free some space or write elsewhere",
           errno.EDQUOT: "free some space or write elsewhere",
           errno.EACCES: "choose a writable directory",
           errno.EPERM: "choose a writable directory",
           errno.EROFS: "the file system is read-only; choose a writable directory"}.get(exc.errno,
                                                                                           "choose another path")
    return f"cannot write '{path}': {why}; {fix}"


# packages every command may read: their data (the catalog, the latency constants, the
# shipped traces and inventories) and their code (the vendored plotly.js a report inlines)
SHIPPED_PACKAGES = ("hardware_catalog", "perfmodels", "workloads", "reports", "provisioner")


@functools.cache
def shipped_folders() -> tuple[Path, ...]:
    """The folders of SHIPPED_PACKAGES, resolved (installed or in a checkout), found
    without importing them (`reports` would import plotly)."""
    specs = (importlib.util.find_spec(package) for package in SHIPPED_PACKAGES)
    folders = (Path(f) for spec in specs if spec is not None for f in spec.submodule_search_locations or ())
    return tuple(f.resolve() for f in folders if f.is_dir())


def resolved(path, flag: str, params: tuple[str, ...] = ()) -> Path:
    """`path` expanded and resolved, or one line naming `flag` when it cannot be: a loop of
    symbolic links (`ln -s b a; ln -s a b`) raised RuntimeError out of `Path.resolve`
    (OSError ELOOP from Python 3.13).

    >>> resolved("/", "--out")
    PosixPath('/')
    """
    try:
        expanded = Path(path).expanduser()
    except RuntimeError:   # `~name` of no user (or no home at all)
        raise ProvisionerError(f"{flag} '{path}' starts with the home folder (~name) of an unknown user; give "
                               f"the full path", params=params) from None
    try:
        return expanded.resolve()
    except RuntimeError:
        why = "leads into a loop of symbolic links"
    except OSError as exc:
        why = ("leads into a loop of symbolic links" if exc.errno == errno.ELOOP
               else f"cannot be resolved ({exc.strerror or exc})")
    raise ProvisionerError(f"{flag} '{path}' {why}; remove or fix the link, or give another path", params=params)


def refuse_shipped(path, flag: str) -> None:
    """Refuse an output inside the shipped packages (`shipped_folders`): an HTML report
    written over the shipped inventory, or a new *.toml in the catalog folder, broke every
    later run."""
    target = resolved(path, flag)
    folder = next((f for f in shipped_folders() if target.is_relative_to(f)), None)
    if folder is not None:
        raise ProvisionerError(f"{flag} '{path}' is in the provisioner's shipped code and data ({folder}), an input "
                               f"of every command; write to another folder")


def refuse_folder_name(path, flag: str) -> None:
    """Refuse an output file typed with a trailing '/' that is no folder (it means one):
    `Path()` drops the slash, and the file would be written under the name before it. The
    CLI calls it on the command line as typed, before click makes the value a Path."""
    if str(path).endswith(("/", os.sep)) and not os.path.isdir(path):
        raise ProvisionerError(f"{flag} '{path}' ends in '/' but is no folder; give a file name such as "
                               f"{Path(path) / 'out'}")


def long_name_part(path) -> str | None:
    """The first part of `path` (a file or folder name) longer than NAME_MAX_BYTES bytes, or None."""
    return next((part for part in Path(path).parts if len(os.fsencode(part)) > NAME_MAX_BYTES), None)


def check_path_length(path, flag: str) -> None:
    """Refuse, naming `flag`, a path with a name over 255 bytes or longer than the system's
    PATH_MAX (4,096 bytes on Linux) as a whole: the file system would refuse it later with
    ENAMETOOLONG, an internal error then."""
    long_part = long_name_part(path)
    if long_part is not None:
        raise ProvisionerError(f"{flag}: '{long_part[:40]}...' is a name of {len(os.fsencode(long_part)):,} bytes, "
                               f"over the {NAME_MAX_BYTES} a file system allows; give a shorter name")
    whole = len(os.fsencode(os.path.abspath(path)))
    if whole >= _PATH_MAX:
        raise ProvisionerError(f"{flag}: a path of {whole:,} bytes, over the {_PATH_MAX:,} this system allows; give "
                               f"a shorter path")


def check_output_path(path, *, flag: str = "path", force: bool = False, force_hint: str = "force=True", inputs=(),
                      parents: bool = False, shipped_ok: bool = False, stdout_taken_by: str | None = None) -> Path:
    """Refuse, before any work, an output that is a directory, exists without `force`,
    lies in a missing directory (created when `parents`) or in one where no file can be
    created, is one of the command's `inputs`, or lies in the shipped packages every
    command reads (`refuse_shipped`; `shipped_ok` for `perf calibrate`'s own constants).
    A special file (a named pipe, a device, a socket) needs `force` too: writing to a pipe
    nobody reads blocks forever, and to a device reaches hardware; `/dev/null` and this
    process's own standard output and error (`/dev/stdout` on a terminal or a pipe) do not.
    stdout_taken_by : what else the command prints on standard output (e.g. "--json"): then
    `path` must not be standard output itself (the two would interleave into neither).

    >>> check_output_path("report.html").name
    'report.html'
    """
    return _checked(path, flag=flag, force=force, force_hint=force_hint, inputs=inputs, parents=parents,
                    shipped_ok=shipped_ok, stdout_taken_by=stdout_taken_by)[0]


def _checked(path, *, flag, force, force_hint, inputs, parents, shipped_ok, stdout_taken_by=None
             ) -> tuple[Path, int | None]:
    """`check_output_path`'s checks; (path, `_own_stream(path)`): the stream is looked up
    once (stat calls) for the checks and the write."""
    global _stdout_is_an_output
    if str(path) == "-":   # written as a file named '-', where the convention reads standard output
        raise ProvisionerError(f"{flag} '-': give a file name, or /dev/stdout for standard output")
    refuse_folder_name(path, flag)
    path = Path(path)
    resolved(path, flag)   # a loop of symbolic links: refused here, not as a crash on writing
    check_path_length(path, flag)   # every stat below would raise ENAMETOOLONG
    stream = _own_stream(path)   # the checks below create at most the parent folder: the path stays as it is
    on_stdout = stream == 1 and not _same_file(path, Path(os.devnull))
    if stdout_taken_by is not None and on_stdout:
        raise ProvisionerError(f"{flag} '{path}' is standard output, where {stdout_taken_by} prints too: write "
                               f"{flag} to a file, or drop {stdout_taken_by}")
    _stdout_is_an_output |= on_stdout
    if str(path) == ".":   # typer reads an empty value as '.': name both
        raise ProvisionerError(f"{flag} is empty or '.', the working directory; give a file name such as out")
    if path.is_dir():
        raise ProvisionerError(f"{flag} '{path}' is a directory; give a file name such as {path / 'out'}")
    if not shipped_ok:
        refuse_shipped(path, flag)
    for source in inputs:
        if source is not None and _same_file(path, Path(source)):
            raise ProvisionerError(f"{flag} '{path}' is also this command's input; write to another file")
    # a file the user redirected standard output or error to (`--report /dev/stdout > f.html`):
    # the shell has opened it as they asked, so there is nothing of theirs left to protect
    if path.exists() and not force and _is_regular(path) and stream is None:
        raise ProvisionerError(f"{flag} '{path}' already exists; pass {force_hint} to overwrite it")
    special = _special_kind(path)
    if special is not None and not force and not _exempt_special(path, stream):
        raise ProvisionerError(f"{flag} '{path}' is {special}, not a regular file; pass {force_hint} to write to it")
    if parents and not path.parent.exists():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ProvisionerError(os_error_line(exc, path)) from None
    if not path.parent.is_dir():
        raise ProvisionerError(f"{flag} '{path}': directory '{path.parent}' does not exist; create it first")
    if not (path.exists() and not _is_regular(path)) and stream is None:   # those are written in place
        _probe_writable(path)
    return path, stream


def _replaced(path: Path) -> Path:
    """The file an atomic write replaces: a symbolic link's target, so that the link stays
    (`--report /dev/stdout > out.html` must not turn /dev/stdout into a file)."""
    return path.resolve() if path.is_symlink() else path


def _temporary_beside(path: Path) -> tuple[int, str]:
    """(fd, name) of a new temporary file in the directory of the file `path` replaces."""
    target = _replaced(path)
    # at most 200 bytes of the name: with its dots, the random part and ".tmp" a 249-byte
    # name made the temporary one longer than the 255 a file system allows
    stem = os.fsencode(target.name)[:200].decode(errors="ignore")
    return tempfile.mkstemp(dir=target.parent, prefix=f".{stem}.", suffix=".tmp")


def _probe_writable(path: Path) -> None:
    """Refuse now, not after a long run, a directory where `write_output` could not create
    its temporary file (read-only, no permission, /proc): create and remove one."""
    try:
        fd, tmp = _temporary_beside(path)
    except OSError as exc:
        raise ProvisionerError(os_error_line(exc, path)) from None
    os.close(fd)
    Path(tmp).unlink(missing_ok=True)


def write_output(path, data: str | bytes, *, flag: str = "path", force: bool = False, force_hint: str = "force=True",
                 inputs=(), parents: bool = False, shipped_ok: bool = False) -> Path:
    """Write `data` to `path` through a temporary file in the same directory, then rename.

    A special file (`/dev/null`, `/dev/full`, a pipe) is written in place, since it
    cannot be renamed over; this process's own standard output or error through its open
    descriptor, whatever it is (a terminal, a pipe, a file the shell opened with `>` or
    `>>`: renaming over it would drop what `>>` keeps); through a symbolic link, the link's
    target is replaced and the link kept. Errors are one-line `ProvisionerError`s.
    """
    path, stream = _checked(path, flag=flag, force=force, force_hint=force_hint, inputs=inputs, parents=parents,
                            shipped_ok=shipped_ok)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        if stream is not None:
            _write_stream(stream, payload)
            return path
        if path.exists() and not _is_regular(path):
            with open(path, "wb") as f:
                f.write(payload)
                f.flush()
            return path
        fd, tmp = _temporary_beside(path)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, _file_mode(path))
            os.replace(tmp, _replaced(path))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        if isinstance(exc, BrokenPipeError) and stream is not None:
            raise   # `--report /dev/stdout | head`: the reader has all it wants; the CLI exits 0 quietly
        raise ProvisionerError(os_error_line(exc, path)) from None
    return path


SPECIAL_KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
                 (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _special_kind(path: Path) -> str | None:
    """What special file `path` is ("a named pipe (FIFO)", ...), or None (a regular file, a
    directory, nothing)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    return next((kind for test, kind in SPECIAL_KINDS if test(mode)), None)


def _exempt_special(path: Path, stream: int | None) -> bool:
    """`/dev/null`, or the very file this process's standard output or error is (`stream`,
    a terminal or a pipe: `--report /dev/stdout | less`): written on purpose, never by a slip."""
    return _same_file(path, Path(os.devnull)) or stream is not None


def _own_stream(path: Path) -> int | None:
    """1 or 2 when `path` is this process's standard output or error (1 when both), else None."""
    try:
        target = path.stat()
    except OSError:   # no such file
        return None
    return next((fd for fd in (1, 2) if _is_fd(target, fd)), None)


def _write_stream(fd: int, payload: bytes) -> None:
    """`payload` on descriptor `fd` (1 or 2) after what Python holds buffered for it."""
    for stream in (sys.stdout, sys.__stdout__) if fd == 1 else (sys.stderr, sys.__stderr__):
        with contextlib.suppress(Exception):   # a closed or replaced stream has nothing for the descriptor
            stream.flush()
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view):]


def _is_fd(target: os.stat_result, fd: int) -> bool:
    """Whether the file of stat `target` is the one this process's descriptor `fd` is (1: standard output)."""
    try:
        own = os.fstat(fd)
    except OSError:   # the descriptor is closed
        return False
    return (own.st_dev, own.st_ino) == (target.st_dev, target.st_ino)


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False
