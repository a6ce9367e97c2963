"""`custom_imports`: the user's modules, imported before anything is built so their
`@REGISTRY.register()` decorators run.

An entry is a module name or a file path:
    custom_imports: [my_modules]           # my_modules.py (or a package) next to the config file,
                                           # or importable from the working directory / sys.path
    custom_imports: [./my_modules.py]      # a file (or package folder), relative to the config file
    custom_imports: [projects.pix2pix]     # the repository's projects, from any working directory

`locate` runs when a config file is read, so names and paths are relative to the file that
lists them (a `_base_` file's own folder, not the child's); what it finds next to that file
becomes an absolute path, which is also what the saved config.yaml records.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

from framework.errors import ConfigError

# The checkout this file is in (framework/config/custom_imports.py), which holds projects/
REPOSITORY = Path(__file__).resolve().parents[2]
HINT = ("custom_imports takes a module name (next to the config file, importable from the working "
        "directory, or projects.* of the repository) or a file path such as ./my_modules.py")


def _is_path(entry: str) -> bool:
    return entry.endswith(".py") or "/" in entry or os.sep in entry


def locate(entries, folder: Path):
    """`entries` with paths made absolute and modules found next to the config file turned into paths."""
    if isinstance(entries, str):
        entries = [entries]
    if not isinstance(entries, list):
        return entries  # the schema check names the key and the value
    located = []
    for entry in entries:
        if isinstance(entry, str) and _is_path(entry):
            entry = str((folder / os.path.expanduser(entry)).resolve())
        elif isinstance(entry, str):
            relative = Path(*entry.split("."))
            for candidate in (folder / relative.with_suffix(".py"), folder / relative / "__init__.py"):
                if "." not in entry and candidate.is_file():  # dotted names stay names: packages import as such
                    entry = str(candidate.parent if candidate.name == "__init__.py" else candidate)
                    break
        located.append(entry)
    return located


def _import_file(path: Path) -> None:
    if not path.exists():
        raise ConfigError(f"custom_imports: file not found: {path}")
    package = path.is_dir()
    init = path / "__init__.py" if package else path
    name = path.name if package else path.stem
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(init):
        return  # imported already (a second run in this process)
    _refuse_shadowing(name, path, init)
    if str(path.parent) not in sys.path:  # so the module can import its neighbours
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(path)] if package else None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    _FROM_FILES.add(name)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise


_FROM_FILES: set[str] = set()  # module names this process imported from custom_imports files


def _refuse_shadowing(name: str, path: Path, init: Path) -> None:
    """A file is imported under its own name, in sys.modules for every later import: a name
    that is a standard-library or installed module would replace that module everywhere."""
    if name in _FROM_FILES:
        return  # one of ours (a second run in this process, maybe from another folder)
    if name in sys.stdlib_module_names:
        other = "a standard-library module"
    else:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        origin = getattr(spec, "origin", None)
        if spec is None or (origin and Path(origin).resolve() == init.resolve()):
            return
        other = f"an installed module ({origin or 'a namespace package'})"
    raise ConfigError(f"custom_imports: {path}: '{name}' is also the name of {other}, which importing this file "
                      "would replace for every later import; rename the file")


def _import_name(name: str) -> None:
    if os.getcwd() not in sys.path:  # user projects are imported relative to where they run
        sys.path.insert(0, os.getcwd())
    try:
        importlib.import_module(name)
        return
    except ModuleNotFoundError as err:
        top = name.split(".")[0]
        if err.name not in (top, name) and not name.startswith(f"{err.name}."):
            raise  # the module was found; something it imports is missing
        if not (REPOSITORY / top).is_dir() or str(REPOSITORY) in sys.path:
            raise
    sys.path.append(str(REPOSITORY))  # projects.* of the repository, from any working directory
    importlib.import_module(name)


def import_custom_modules(cfg) -> None:
    """Import every entry of `cfg.custom_imports` (see the module docstring)."""
    entries = cfg.get("custom_imports") or []
    for entry in [entries] if isinstance(entries, str) else entries:
        try:
            if _is_path(entry):
                _import_file(Path(entry))
            else:
                _import_name(entry)
        except ImportError as err:
            missing = f" ({HINT})" if isinstance(err, ModuleNotFoundError) and entry.startswith(str(err.name)) else ""
            raise ConfigError(f"custom_imports: cannot import '{entry}': {err}{missing}") from err
