"""The one refuse-to-overwrite rule of every file the package writes (HTML reports, the
perf CLI's CSV and HTML, calibrations written elsewhere than the package's default)."""

from __future__ import annotations

from pathlib import Path

from .errors import ProvisionerError


def check_new_file(path, *, force: bool = False, name: str = "path", force_hint: str = "force=True") -> Path:
    """`path` as a Path if a file may be written there, else a one-line `ProvisionerError`.

    Refuses a directory, and an existing file unless `force`. `name` and `force_hint` are
    how the caller's user knows the path and the override (the library's parameter names
    by default; the CLI passes its flags, e.g. "--out" and "--force").

    >>> check_new_file("no/such/file.html").name
    'file.html'
    """
    path = Path(path)
    if path.is_dir():
        raise ProvisionerError(f"{name} '{path}' is a directory; give a file name such as {path / 'report.html'}")
    if path.exists() and not force:
        raise ProvisionerError(f"{name} '{path}' exists; pass {force_hint} to overwrite it")
    return path
