"""Every third-party package the framework, its tools and projects import is declared in setup.py."""

import ast
import re
import sys
from importlib.metadata import packages_distributions

from support import REPO

LOCAL = {"framework", "projects", "support", "probes", "tools"}
# Modules whose package is not installed here (optional extras) or whose name differs from it.
KNOWN = {"torch_fidelity": ["torch-fidelity"], "PIL": ["Pillow"], "cv2": ["opencv-python-headless"], "yaml": ["PyYAML"]}


def imported_modules() -> dict[str, str]:
    """Top-level module -> a file importing it, for every import (also inside functions)."""
    found = {}
    for folder in ("framework", "tools", "projects"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if "tests" in path.relative_to(REPO).parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    found.setdefault(name.split(".")[0], str(path.relative_to(REPO)))
    return {m: f for m, f in found.items() if m not in sys.stdlib_module_names and m not in LOCAL}


def declared() -> set[str]:
    setup = next(n for n in ast.walk(ast.parse((REPO / "setup.py").read_text()))
                 if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    keywords = {k.arg: ast.literal_eval(k.value) for k in setup.keywords if k.arg in ("install_requires", "extras_require")}
    requirements = keywords["install_requires"] + [r for extra in keywords["extras_require"].values() for r in extra]
    return {normalise(re.split(r"[<>=!~\[; ]", r)[0]) for r in requirements}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_imported_package_is_declared():
    distributions = packages_distributions()
    have = declared()
    missing = []
    for module, where in imported_modules().items():
        candidates = KNOWN.get(module) or distributions.get(module) or [module]
        if not any(normalise(c) in have for c in candidates):
            missing.append(f"{module} ({where}; package {' or '.join(candidates)})")
    assert not missing, "imported but not declared in setup.py: " + ", ".join(missing)


def test_one_version_in_setup_py_framework_and_the_changelog():
    """setup.py, `framework.__version__` and the newest version heading of CHANGELOG.md agree."""
    import framework

    setup = next(n for n in ast.walk(ast.parse((REPO / "setup.py").read_text()))
                 if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    version = next(ast.literal_eval(k.value) for k in setup.keywords if k.arg == "version")
    newest = re.search(r"^## \[?(\d+\.\d+\.\d+)", (REPO / "CHANGELOG.md").read_text(), re.M).group(1)
    assert version == framework.__version__ == newest

