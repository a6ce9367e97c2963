"""The one-way layering of `framework/` (docs/architecture.md): a package imports only packages
in its own layer or below. Every import counts, the lazy ones inside functions included."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Lowest first. A module may import its own layer and the layers before it.
LAYERS = [
    {"registry", "errors", "serialization", "__init__"},
    {"config"},
    {"data", "models", "losses", "metrics", "visualization"},
    {"inference"},
    {"analysis"},
    {"tasks"},
    {"dist"},
    {"optim", "checkpoint", "weights"},
    {"runtime"},
    {"engine"},
    {"comparison"},  # runs tools/train.py processes and reads their files; nothing imports it
    {"projects"},  # framework never imports projects
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def _part(module: str) -> str | None:
    """`framework.engine.hooks` -> `engine`; `projects.pix2pix` -> `projects`; others: None."""
    parts = module.split(".")
    if parts[0] == "projects":
        return "projects"
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


def upward_imports(package_root: Path) -> list[str]:
    """Every import in `package_root` (a `framework/` folder) of a higher layer, as `file:line: a -> b`."""
    problems = []
    for path in sorted(package_root.rglob("*.py")):
        relative = path.relative_to(package_root)
        importer = relative.parts[0].removesuffix(".py")
        if importer not in RANK:
            problems.append(f"{relative}: the package {importer!r} has no layer in tests/test_layering.py")
            continue
        for line, module in _imported_modules(ast.parse(path.read_text(), str(path))):
            target = _part(module)
            if target is None:
                continue
            if target not in RANK:
                problems.append(f"{relative}:{line}: imports {module}, which has no layer")
            elif RANK[target] > RANK[importer]:
                problems.append(f"{relative}:{line}: {importer} imports {module} (a higher layer)")
    return problems


def test_framework_imports_only_downward():
    assert upward_imports(ROOT / "framework") == []


def test_every_layer_is_a_real_package():
    packages = {p.name for p in (ROOT / "framework").iterdir() if (p / "__init__.py").exists()}
    modules = {p.stem for p in (ROOT / "framework").glob("*.py")}
    assert packages | modules == set(RANK) - {"projects"}


def test_a_planted_upward_import_is_reported(tmp_path):
    for package in ("config", "engine", "models"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "config" / "loading.py").write_text("def f():\n    from framework.engine.trainer import Trainer\n")
    (tmp_path / "models" / "unet.py").write_text("from framework import engine\nfrom framework.config import x\n")
    assert upward_imports(tmp_path) == [
        "config/loading.py:2: config imports framework.engine.trainer (a higher layer)",
        "models/unet.py:1: models imports framework.engine (a higher layer)",
    ]


def test_no_package_folder_is_a_grab_bag():
    """A newcomer finds things by folder: none holds more than 15 modules."""
    for folder in (ROOT / "framework").rglob("*"):
        if folder.is_dir() and folder.name != "__pycache__":
            modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
            assert len(modules) <= 15, f"{folder.relative_to(ROOT)} holds {len(modules)} modules"
