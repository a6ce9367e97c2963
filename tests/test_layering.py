"""The dependency graph of `framework/` (docs/architecture.md): which package may import which.

`MAY_IMPORT` is the graph: every import of every module (the lazy ones inside functions too) must
follow one of its edges, the graph must have no cycle, and each package's `__init__.py` docstring
says the same in its "May import:" line. A new edge is a design decision: add it here and to the
importing package's docstring, downward only (the cycle check refuses the other way).
"""

from __future__ import annotations

import ast
import re
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# `errors` at the bottom; `dist` right above it (it needs only errors and torch), so every layer
# can use it instead of calling torch.distributed or re-deriving DDP unwrapping. `__init__` is
# framework/__init__.py; tools/ and projects/ may import any of these, and none of them imports
# tools/ or projects/.
MAY_IMPORT: dict[str, set[str]] = {
    "errors": set(),
    "keywords": {"errors"},  # the typed keywords of a component, checked by the registry's build
    "registry": {"errors", "keywords"},
    "__init__": {"registry"},
    "serialization": {"errors"},
    "config": {"errors", "registry"},
    "dist": {"errors"},
    "visualization": {"errors"},
    # data -> runtime: the fixture writer's refusal to write into a folder it did not create (overwrite.py)
    "data": {"errors", "registry", "dist", "visualization", "runtime"},
    "models": {"errors", "registry", "dist"},
    "losses": {"errors", "registry", "dist", "serialization", "models"},
    "metrics": {"errors", "registry", "dist", "serialization", "visualization", "config", "models"},
    "inference": {"errors", "dist"},
    "analysis": {"errors", "dist", "data", "losses", "inference"},
    "tasks": {"errors", "registry", "dist", "models", "losses", "visualization", "inference"},
    "optim": {"errors", "registry", "dist"},
    "checkpoint": {"errors", "serialization"},
    "weights": {"errors", "registry", "serialization", "models"},
    "runtime": {"errors", "registry", "config", "checkpoint"},
    "engine": {"__init__", "errors", "registry", "serialization", "config", "dist", "data", "models", "losses",
               "metrics", "visualization", "inference", "analysis", "tasks", "optim", "checkpoint", "weights",
               "runtime"},
    # the Python API (framework.load, train, evaluate): above the engine, as the tools are
    "api": {"__init__", "errors", "config", "dist", "data", "engine", "inference", "metrics", "tasks", "visualization",
            "checkpoint", "runtime"},
    # seeds x configs (tools/compare.py): runs are separate training processes, so not the engine
    "comparison": {"__init__", "errors", "registry", "config", "metrics", "checkpoint"},
}

# Packages that still use torch.distributed (or DDP's `.module`) themselves: none; never add one.
USES_TORCH_DISTRIBUTED_UNTIL_SWITCHED: set[str] = set()

MAX_LINES = 300
# Modules over MAX_LINES until their owners split them. Empty now; never add to it.
LONG_UNTIL_SPLIT: set[str] = set()


def _part(module: str) -> str | None:
    """`framework.engine.hooks` -> `engine`; `framework` -> `__init__`; `projects.x` -> `projects`;
    `tools.x` -> `tools`; anything else (torch, numpy): None."""
    parts = module.split(".")
    if parts[0] in ("projects", "tools"):
        return parts[0]
    if parts[0] != "framework":
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def _imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from framework import dist` imports framework.dist
            found += [(node.lineno, f"{node.module}.{alias.name}" if node.module == "framework" else node.module)
                      for alias in node.names]
    return found


def _importer(relative: Path) -> str:
    return relative.parts[0].removesuffix(".py")


def _framework_imports(path: Path) -> list[tuple[int, str, str]]:
    """(line, module, package) of each import of a framework package (or of tools/, projects/)."""
    found = []
    for line, module in _imported_modules(ast.parse(path.read_text(), str(path))):
        target = _part(module)
        if target is not None:
            found.append((line, module, target))
    return found


def forbidden_imports(package_root: Path, graph: dict[str, set[str]] = MAY_IMPORT) -> list[str]:
    """Every import in `package_root` (a `framework/` folder) that `graph` does not allow, as
    `file:line: a imports b (...)`."""
    problems = []
    for path in sorted(package_root.rglob("*.py")):
        relative = path.relative_to(package_root)
        importer = _importer(relative)
        if importer not in graph:
            problems.append(f"{relative}: the package {importer!r} is not in tests/test_layering.py's MAY_IMPORT")
            continue
        for line, module, target in _framework_imports(path):
            if target != importer and target not in graph[importer]:
                problems.append(f"{relative}:{line}: {importer} imports {module} (may import: "
                                f"{', '.join(sorted(graph[importer])) or 'nothing'})")
    return problems


def cycle_in(graph: dict[str, set[str]]) -> list[str]:
    """A cycle of `graph` as a list of names (empty when it is a DAG)."""
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as err:
        return list(err.args[1])
    return []


def declared_imports(init_file: Path) -> set[str] | None:
    """The packages the "May import:" line of a package's docstring names (None without one).

    The list runs to the first `;` or the end of the sentence; names may be written
    `framework.x` or in backticks, with a remark in parentheses; "nothing" is the empty set."""
    docstring = ast.get_docstring(ast.parse(init_file.read_text())) or ""
    match = re.search(r"^May import:(.*?)(?:;|\.\s|\.\Z|\n\s*\n|\Z)", docstring, re.S | re.M)
    if not match:
        return None
    text = re.sub(r"\([^)]*\)", "", match.group(1).replace("`", "").replace("framework.", ""))
    names = {name.strip() for name in re.split(r",|\band\b", " ".join(text.split()))} - {""}
    names = {"__init__" if name == "framework" else name for name in names}  # framework/__init__.py
    return set() if names == {"nothing"} else names


def test_every_import_follows_the_graph():
    assert forbidden_imports(ROOT / "framework") == []


def test_the_graph_has_no_cycle():
    assert cycle_in(MAY_IMPORT) == []
    assert cycle_in({**MAY_IMPORT, "errors": {"engine"}})  # the check itself sees one


def test_the_graph_names_every_package_and_only_packages():
    packages = {p.name for p in (ROOT / "framework").iterdir() if (p / "__init__.py").exists()}
    modules = {p.stem for p in (ROOT / "framework").glob("*.py")}
    assert packages | modules == set(MAY_IMPORT)
    assert set().union(*MAY_IMPORT.values()) <= set(MAY_IMPORT)


def test_every_package_says_what_it_owns_and_what_it_may_import():
    for init_file in sorted((ROOT / "framework").rglob("__init__.py")):
        docstring = ast.get_docstring(ast.parse(init_file.read_text())) or ""
        name = init_file.parent.relative_to(ROOT).as_posix()
        assert re.search(r"^Owns:", docstring, re.M), f"{name}/__init__.py: no 'Owns:' line"
        assert declared_imports(init_file) is not None, f"{name}/__init__.py: no 'May import:' line"


def test_each_packages_may_import_line_names_exactly_its_edges():
    wrong = {}
    for package, allowed in MAY_IMPORT.items():
        init_file = ROOT / "framework" / ("__init__.py" if package == "__init__" else f"{package}/__init__.py")
        if init_file.exists() and declared_imports(init_file) != allowed:
            wrong[package] = (sorted(declared_imports(init_file) or ()), sorted(allowed))
    assert wrong == {}, "package: (its docstring's May import, MAY_IMPORT)"


def test_a_sub_packages_may_import_line_is_true_and_within_its_parents():
    """engine/hooks, models/encoders, ...: what they import of other packages is in their own
    "May import:" line, and that line asks for nothing their parent may not import."""
    for init_file in sorted((ROOT / "framework").glob("*/*/__init__.py")):
        parent = init_file.parent.parent.name
        declared = declared_imports(init_file)
        name = init_file.parent.relative_to(ROOT / "framework").as_posix()
        assert declared is not None and declared <= MAY_IMPORT[parent], name
        undeclared = [f"{path.relative_to(ROOT)}:{line}: {module}" for path in sorted(init_file.parent.rglob("*.py"))
                      for line, module, target in _framework_imports(path) if target not in declared | {parent}]
        assert undeclared == [], f"{name}/__init__.py's May import line lacks these"


def test_a_planted_forbidden_import_is_reported(tmp_path):
    for package in ("config", "engine", "models"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "config" / "loading.py").write_text("def f():\n    from framework.engine.trainer import Trainer\n")
    (tmp_path / "models" / "unet.py").write_text("from framework import engine\nfrom framework.registry import x\n"
                                                 "import projects.pix2pix\n")
    assert forbidden_imports(tmp_path) == [
        "config/loading.py:2: config imports framework.engine.trainer (may import: errors, registry)",
        "models/unet.py:1: models imports framework.engine (may import: dist, errors, registry)",
        "models/unet.py:3: models imports projects.pix2pix (may import: dist, errors, registry)",
    ]


def test_a_planted_package_outside_the_graph_is_reported(tmp_path):
    (tmp_path / "extras").mkdir()
    (tmp_path / "extras" / "__init__.py").write_text("")
    assert forbidden_imports(tmp_path) == [
        "extras/__init__.py: the package 'extras' is not in tests/test_layering.py's MAY_IMPORT"]


@pytest.mark.parametrize("line, names", [
    ("May import: errors, registry, serialization (safe reads), models; never the engine.",
     {"errors", "registry", "serialization", "models"}),
    ("May import: `framework.registry` and `framework.errors` (and torch); nothing else", {"registry", "errors"}),
    ("May import: errors, registry,\n  dist, models (its\n stem rule). Then prose; more.", {"errors", "registry", "dist",
                                                                                   "models"}),
    ("May import: nothing.", set()),
    ("May import: framework (its `__init__.py`), errors and\nruntime (all); only tools.", {"__init__", "errors", "runtime"}),
    ("May import: errors and dist.\nMore text, with commas, here.", {"errors", "dist"}),
])
def test_the_may_import_line_is_read_as_written(tmp_path, line, names):
    (tmp_path / "__init__.py").write_text(f'"""Title.\n\nOwns: things.\n{line}\n"""\n')
    assert declared_imports(tmp_path / "__init__.py") == names


def torch_distributed_uses(package_root: Path) -> list[str]:
    """Where a module outside dist/ imports torch.distributed or DistributedDataParallel, or
    reaches torch.distributed through `torch.`, as `file:line`."""
    found = []
    for path in sorted(package_root.rglob("*.py")):
        relative = path.relative_to(package_root)
        if _importer(relative) == "dist":
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                names = [f"{node.value.id}.{node.attr}"]
            if any(n.startswith("torch.distributed") or n.endswith("DistributedDataParallel") for n in names):
                found.append(f"{relative}:{node.lineno}")
    return sorted(set(found))


def test_only_dist_talks_to_torch_distributed():
    uses = torch_distributed_uses(ROOT / "framework")
    unexpected = [u for u in uses if u.split("/")[0] not in USES_TORCH_DISTRIBUTED_UNTIL_SWITCHED]
    assert unexpected == [], "call framework.dist (unwrap, all_reduce_sum_, all_gather_rows, ...) instead"


def test_a_planted_torch_distributed_use_is_reported(tmp_path):
    for package, text in {
        "dist": "import torch.distributed as dist\n",  # its own business
        "metrics": "import torch.distributed as dist\nfrom torch import distributed\n",
        "models": "import torch\n\ndef f(x):\n    return torch.distributed.is_initialized()\n",
        "inference": "def f(n):\n    from torch.nn.parallel import DistributedDataParallel\n",
    }.items():
        (tmp_path / package).mkdir()
        (tmp_path / package / "m.py").write_text(text)
    assert torch_distributed_uses(tmp_path) == ["inference/m.py:2", "metrics/m.py:1", "metrics/m.py:2",
                                                "models/m.py:4"]


def test_no_module_is_over_300_lines():
    long = {path.relative_to(ROOT / "framework").as_posix(): len(path.read_text().splitlines())
            for path in (ROOT / "framework").rglob("*.py")}
    over = {name for name, lines in long.items() if lines > MAX_LINES}
    assert over - LONG_UNTIL_SPLIT == set(), {name: long[name] for name in over - LONG_UNTIL_SPLIT}
    assert LONG_UNTIL_SPLIT <= set(long), "a listed module is gone: drop it from LONG_UNTIL_SPLIT"


def test_no_package_folder_is_a_grab_bag():
    """A newcomer finds things by folder: none holds more than 15 modules."""
    for folder in (ROOT / "framework").rglob("*"):
        if folder.is_dir() and folder.name != "__pycache__":
            modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
            assert len(modules) <= 15, f"{folder.relative_to(ROOT)} holds {len(modules)} modules"


def _type_checking_lines(tree: ast.AST) -> set[int]:
    """Lines of the imports under `if TYPE_CHECKING:`, which run only for a type checker."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            lines |= {inner.lineno for block in node.body for inner in ast.walk(block)
                      if isinstance(inner, (ast.Import, ast.ImportFrom))}
    return lines


def _module_of(name: str) -> str | None:
    """The framework module (dotted) a dotted name is, or None when it is no module's file."""
    path = ROOT.joinpath(*name.split("."))
    if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
        return name
    return None


def module_import_graph() -> dict[str, set[str]]:
    """{module: modules it imports} over framework/, lazy imports in functions included and the
    type-only ones (`if TYPE_CHECKING:`) left out; `from a.b import c` is an edge to a.b.c where
    c is a module, else to a.b."""
    graph: dict[str, set[str]] = {}
    for path in sorted((ROOT / "framework").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        tree = ast.parse(path.read_text(), str(path))
        type_only = _type_checking_lines(tree)
        targets = set()
        for node in ast.walk(tree):
            if node.lineno in type_only if hasattr(node, "lineno") else True:
                continue
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets |= {_module_of(f"{node.module}.{alias.name}") or node.module for alias in node.names}
        graph[module] = {target for target in targets if target.startswith("framework") and _module_of(target)
                         and target != module}
    return graph


def test_no_module_imports_itself_through_others():
    """No circle of imports between framework's modules (issue 65): a circle means neither side can
    be read, tested or moved without the other. Type-only imports (`if TYPE_CHECKING:`, e.g. a
    hook's `Trainer` annotation) are not imports at run time and are left out. A package's
    `__init__` re-exporting its modules is an edge like any other."""
    assert cycle_in(module_import_graph()) == []
