"""Where numba keeps the compiled simulator: a per-user cache, never the package directory.

numba's default for `cache=True` is `__pycache__` beside the source, i.e. inside
site-packages. pip does not know those files, so uninstalling leaves
`provisioner/sim/` behind holding only the cache, and that empty directory then
shadows an editable install as a namespace package (issue #16). A per-user directory
keeps installs, upgrades and uninstalls clean and lets a read-only install cache too.

Resolution order: `PROVISIONER_JIT_CACHE`, then numba's own `NUMBA_CACHE_DIR` (a user
who set it chose), then `$XDG_CACHE_HOME/provisioner/numba` (`~/.cache/...`), then a
per-user directory under the system temp dir when the home directory is not writable.
Import this module before any `@njit(cache=True)` runs its decorator.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

CACHE_ENV = "PROVISIONER_JIT_CACHE"


def _writable(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=path, prefix=".probe-", delete=True)
        probe.close()
        return True
    except OSError:
        return False


def jit_cache_dir() -> Path:
    """The directory numba writes compiled kernels to (created on first use)."""
    chosen = os.environ.get(CACHE_ENV) or os.environ.get("NUMBA_CACHE_DIR")
    if chosen:
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    default = Path(base).expanduser() / "provisioner" / "numba"
    if _writable(default):
        return default
    uid = os.getuid() if hasattr(os, "getuid") else os.getpid()
    return Path(tempfile.gettempdir()) / f"provisioner-numba-{uid}"


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
