"""One-way dependencies between the packages (README, "How it works"), public names only
from outside a package, and no package reaching into another's `_private` modules.

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


# Imports of another package's private module that predate the rule below, each with why it
# stays (importer, private module). Make the name public in the package's __init__ and drop
# its line here, rather than add one.
KNOWN_PRIVATE_IMPORTS: set[tuple[str, str]] = set()


def _is_package(module: str, root: Path) -> bool:
    return (root / module.replace(".", "/") / "__init__.py").exists()


def cross_package_private_imports(root: Path = ROOT) -> set[tuple[str, str, str]]:
    """(importer, private module or name, where) of every import, inside the shipped packages,
    of a `_private` module or name of a package the importer is not part of. A private
    module's package is the one holding it (`provisioner.sim` for `provisioner.sim._fluid`),
    and its sub-packages are part of it (`provisioner.sweep` may import `provisioner._validation`)."""
    found = set()
    for top in LAYERS[:-1]:
        for path in sorted((root / top).rglob("*.py")):
            here = module_name(path, root)
            for line, target, names in imports(path, root):
                if layer_of(target) is None:
                    continue
                parts = target.split(".")
                private = next((k for k, part in enumerate(parts) if part.startswith("_")), None)
                if private is not None:
                    reached = [(".".join(parts[:private]), ".".join(parts[:private + 1]))]
                else:
                    owner = target if _is_package(target, root) else target.rpartition(".")[0]
                    reached = [(owner, f"{target}.{n}") for n in names if n.startswith("_") and not n.startswith("__")]
                for owner, what in reached:
                    if here != owner and not here.startswith(owner + "."):
                        found.add((here, what, f"{path.relative_to(root)}:{line}"))
    return found


def test_no_package_imports_another_packages_private_module():
    """`provisioner.sweep` read the price cap from `provisioner.cloud._inventory`: a private
    module is its package's to change. What several packages share lives in the public
    `__init__` of its package or in a module of a package above them (`provisioner._validation`)."""
    found = cross_package_private_imports()
    bad = sorted(f"{where}: {here} imports {what}" for here, what, where in found
                 if (here, what) not in KNOWN_PRIVATE_IMPORTS)
    assert not bad, "private modules of another package:\n" + "\n".join(bad)
    gone = KNOWN_PRIVATE_IMPORTS - {(here, what) for here, what, _ in found}
    assert not gone, f"no longer imported, drop from KNOWN_PRIVATE_IMPORTS: {sorted(gone)}"


def test_the_private_import_scan_sees_modules_and_names(tmp_path):
    for package in ("provisioner", "provisioner/sim", "provisioner/sweep"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "provisioner/_validation.py").write_text("")
    (tmp_path / "provisioner/sim/_fluid.py").write_text("from .._validation import X\n")
    (tmp_path / "provisioner/sweep/_spec.py").write_text("from .._validation import X\nfrom ..sim._fluid import f\n"
                                                          "from ..sim import _fluid, simulate\n")
    for top in ("hardware_catalog", "workloads", "perfmodels", "reports"):
        (tmp_path / top).mkdir()
    found = {(here, what) for here, what, _ in cross_package_private_imports(tmp_path)}
    assert found == {("provisioner.sweep._spec", "provisioner.sim._fluid")}


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
