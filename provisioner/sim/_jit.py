"""Where numba keeps the compiled simulator: a per-user cache, never the package directory.

numba's default for `cache=True` is `__pycache__` beside the source, i.e. inside
site-packages. pip does not know those files, so uninstalling leaves
`provisioner/sim/` behind holding only the cache, and that empty directory then
shadows an editable install as a namespace package (issue #16). A per-user directory
keeps installs, upgrades and uninstalls clean and lets a read-only install cache too.

Resolution order: `PROVISIONER_JIT_CACHE`, then numba's own `NUMBA_CACHE_DIR` (a user
who set it chose), then `$XDG_CACHE_HOME/provisioner/numba` (`~/.cache/...`), then a
per-user directory under the system temp dir when the home directory is not writable.
A variable naming a file, or a directory that cannot be created or written, is passed
over with a one-line warning on stderr: numba would otherwise fall back, without a word,
to `__pycache__` inside the package (the very directory this module keeps it out of).
Import this module before any `@njit(cache=True)` runs its decorator.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

CACHE_ENV = "PROVISIONER_JIT_CACHE"
CHOSEN_ENVS = (CACHE_ENV, "NUMBA_CACHE_DIR")   # the user's choices, first wins


def _unusable(path: Path) -> str | None:
    """Why numba could not keep its cache in `path` (None: it can). numba's own test:
    create the directory, then a file in it."""
    if path.exists() and not path.is_dir():
        return "is a file, not a directory"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=path, prefix=".probe-", delete=True)
        probe.close()
        return None
    except OSError as exc:
        return f"cannot be used as a directory ({exc.strerror or exc})"


def _writable(path: Path) -> bool:
    return _unusable(path) is None


def _warn(line: str) -> None:
    try:
        sys.stderr.write(f"warning: {line}\n")
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):   # stderr closed (`2>&-`)
        pass


def jit_cache_dir() -> Path:
    """The directory numba writes compiled kernels to (created on first use).

    A chosen directory (`CHOSEN_ENVS`) that cannot hold the cache is passed over with a
    one-line warning naming the directory used instead, and its variable is dropped from
    this process's environment, so that worker processes, which inherit it, do not warn
    again.
    """
    passed_over = []
    path = None
    for env in CHOSEN_ENVS:
        chosen = os.environ.get(env)
        if not chosen:
            continue
        why = _unusable(Path(chosen).expanduser())
        if why is None:
            path = Path(chosen).expanduser()
            break
        os.environ.pop(env)
        passed_over.append((env, chosen, why))
    if path is None:
        path = _default_dir()
    for env, chosen, why in passed_over:
        _warn(f"{env} '{chosen}' {why}; caching the compiled simulator in {path} instead (set {env} to a "
              f"writable directory, or unset it)")
    return path


def _default_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = xdg or Path.home() / ".cache"
    default = Path(base).expanduser() / "provisioner" / "numba"
    if _writable(default):
        return default
    uid = os.getuid() if hasattr(os, "getuid") else os.getpid()
    fallback = Path(tempfile.gettempdir()) / f"provisioner-numba-{uid}"
    if xdg:   # chosen, as the variables above: said (the first run there compiles for a minute)
        why = _unusable(Path(xdg).expanduser()) or "cannot hold the cache"
        _warn(f"XDG_CACHE_HOME '{xdg}' {why}; caching the compiled simulator in {fallback} instead (set "
              f"XDG_CACHE_HOME to a writable directory, or unset it)")
    return fallback


def kernel_source_digest() -> str:
    """SHA-256 (12 hex digits) of the files compiled into the fluid kernel.

    numba's cache index only tracks the modification time of the file that defines a
    kernel (`_fluid.py`), not of the functions it compiles in from elsewhere (the
    scalar iteration time in `perfmodels/_scalar.py`, the measured-profile lookup in
    `perfmodels/_profile_eval.py`, the GPU-sharing rule in `perfmodels/_contention.py`, the shared-link queue in `_des_scalar.py`); a cache directory per
    source digest makes any edit of either start a fresh cache instead of a stale one.
    """
    import hashlib
    import importlib.util

    perfmodels_dir = Path(importlib.util.find_spec("perfmodels").origin).parent
    digest = hashlib.sha256()
    for source in (Path(__file__).with_name("_fluid.py"), Path(__file__).with_name("_des_scalar.py"),
                   perfmodels_dir / "_scalar.py", perfmodels_dir / "_profile_eval.py",
                   perfmodels_dir / "_contention.py"):
        digest.update(source.read_bytes())
    return digest.hexdigest()[:12]


def configure_jit_cache() -> Path:
    """Point numba's cache at `jit_cache_dir()/kernel-DIGEST`, both in the environment
    (numba re-reads it when its config reloads, worker processes inherit it) and in the
    live config (already imported numba)."""
    base = jit_cache_dir()
    leaf = f"kernel-{kernel_source_digest()}"
    path = base if base.name == leaf else base / leaf   # inherited from a parent process: as is
    os.environ["NUMBA_CACHE_DIR"] = str(path)
    from numba.core import config
    config.CACHE_DIR = str(path)
    return path


CACHE_DIR = configure_jit_cache()
