"""One-way dependencies between the packages (README, "How it works"), and public names only
from outside a package.

Layers, lowest first; a module may import its own package and the layers below it, never
one above (lazy imports inside functions included: the scan reads every import statement
of the source, not what happens to be imported at run time):

    hardware_catalog < workloads < perfmodels < provisioner (library) < reports < provisioner.cli
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("hardware_catalog", "workloads", "perfmodels", "provisioner", "reports", "provisioner.cli")
OUTSIDE = ("tests", "benchmarks", "notebooks")


def layer_of(module: str) -> int | None:
    """The layer of a dotted module name (the longest matching layer prefix), or None."""
    best = None
    for i, name in enumerate(LAYERS):
        if module == name or module.startswith(name + "."):
            if best is None or len(name) > len(LAYERS[best]):
                best = i
    return best


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, root: Path = ROOT) -> list[tuple[int, str, tuple[str, ...]]]:
    """(line, absolute module, imported names) of every import statement in `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = module_name(path, root)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, ()) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names = tuple(a.name for a in node.names)
            out.append((node.lineno, base, names))
            # `from . import _x` imports the module `package._x`.
            out += [(node.lineno, f"{base}.{n}", ()) for n in names if node.level and not node.module]
    return out


def upward_imports(root: Path = ROOT) -> list[str]:
    bad = []
    for top in ("hardware_catalog", "workloads", "perfmodels", "provisioner", "reports"):
        for path in sorted((root / top).rglob("*.py")):
            mine = layer_of(module_name(path, root))
            for line, target, _ in imports(path, root):
                theirs = layer_of(target)
                if theirs is not None and theirs > mine:
                    bad.append(f"{path.relative_to(root)}:{line} ({LAYERS[mine]}) imports {target} "
                               f"({LAYERS[theirs]}, a higher layer)")
    return bad


def private_imports(root: Path = ROOT) -> list[str]:
    """Imports of a private module or name of a package from tests, benchmarks, notebooks."""
    bad = []
    for top in OUTSIDE:
        for path in sorted((root / top).rglob("*.py")):
            for line, target, names in imports(path, root):
                if layer_of(target) is None:
                    continue
                private = [p for p in target.split(".") if p.startswith("_")] + \
                          [n for n in names if n.startswith("_")]
                if private:
                    bad.append(f"{path.relative_to(root)}:{line} imports {target} {names}")
    return bad


def test_no_package_imports_a_higher_layer():
    bad = upward_imports()
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_tests_and_benchmarks_use_public_names_only():
    bad = private_imports()
    assert not bad, "private names imported from outside their package:\n" + "\n".join(bad)


@pytest.mark.parametrize("module, layer", [
    ("hardware_catalog._loader", "hardware_catalog"), ("provisioner.search._problem", "provisioner"),
    ("provisioner.cli._main", "provisioner.cli"), ("reports", "reports"), ("numpy", None),
])
def test_layer_of(module, layer):
    got = layer_of(module)
    assert (LAYERS[got] if got is not None else None) == layer


def test_the_scan_sees_lazy_and_relative_imports(tmp_path):
    pkg = tmp_path / "perfmodels"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "_x.py").write_text("def f():\n    from provisioner import simulate\n    from . import _y\n")
    for top in ("hardware_catalog", "workloads", "provisioner", "reports"):
        (tmp_path / top).mkdir()
    bad = upward_imports(tmp_path)
    assert bad == ["perfmodels/_x.py:2 (perfmodels) imports provisioner (provisioner, a higher layer)"]


@pytest.mark.parametrize("package", ["hardware_catalog", "workloads", "perfmodels", "provisioner", "provisioner.sim",
                                     "provisioner.search", "provisioner.cli", "reports"])
def test_each_package_lists_its_public_api(package):
    import importlib

    module = importlib.import_module(package)
    assert module.__all__, f"{package}/__init__.py has no __all__"
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert not missing, f"{package}.__all__ names what it does not define: {missing}"
    assert not [n for n in module.__all__ if n.startswith("_")]
