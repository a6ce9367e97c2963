"""No tool writes over a file it reads: the one check every tool that writes files makes, before
it writes anything.

A user who points `--output` at the `--input` folder (or at a folder holding an input, or at a
symlink to either) would otherwise lose the files the run reads: label maps replaced by generated
images, photos by translations, colour masks by index masks, a config by its resolved copy. Paths
are compared resolved (`os.path.realpath`: symlinks followed, `~` expanded), because a link and
its target are one file to the operating system that writes through it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from framework.errors import ConfigError


def resolved(path: str | os.PathLike) -> Path:
    """The path the operating system writes through: `~` expanded, symlinks followed (also for a
    path that does not exist yet: its existing part is resolved)."""
    return Path(os.path.realpath(os.path.expanduser(os.fspath(path))))


def refuse_writing_over_inputs(output_option: str, output: str | os.PathLike,
                               inputs: Iterable[tuple[str, str | os.PathLike]],
                               writes: Iterable[str | os.PathLike] = (), output_is_folder: bool = True,
                               other_reads: Iterable[tuple[str, str | os.PathLike]] = ()) -> None:
    """A ConfigError, one line naming both paths, when writing would replace a file read.

    `inputs`: (how the user named it, e.g. "--input" or "data.val.dataset", path) for the data
    files and folders the tool reads; `other_reads`: the same for the files it reads besides
    (config, checkpoint); `writes`: every file it will write (under `output` when that is a folder).
    Refused: an output folder that is an input folder or directly holds an input file (whatever
    the tool names its results, they land among the inputs), and any written file that is a file
    read (an output folder above an input folder whose results' subfolder has the input folder's
    name, a symlink in the output folder to an input, a report named like the config). A folder
    that merely holds the config or checkpoint (a run's folder) takes results."""
    read_at: dict[Path, tuple[str, str]] = {}
    for label, path in inputs:
        read_at.setdefault(resolved(path), (label, os.fspath(path)))
    input_paths = list(read_at)  # in the order given: the same input named on every run
    for label, path in other_reads:
        read_at.setdefault(resolved(path), (label, os.fspath(path)))
    where = resolved(output)
    if output_is_folder:
        for read in input_paths:
            label, path = read_at[read]
            if read == where:
                same = "folder" if read.is_dir() else "file"
                raise ConfigError(f"{output_option} {os.fspath(output)}: the same {same} as {label} {path}; results "
                                  "written there could replace the files read: choose another folder")
            if read.parent == where and not read.is_dir():
                raise ConfigError(f"{output_option} {os.fspath(output)}: holds {label} {path}; results written there "
                                  "could replace the files read: choose another folder")
    for written in writes:
        found = read_at.get(resolved(written))
        if found is not None:
            label, path = found
            raise ConfigError(f"{output_option} {os.fspath(output)}: would write {os.fspath(written)}, which is "
                              f"{label} {path}: choose another {'folder' if output_is_folder else 'file'}")


def refuse_foreign_folder(option: str, folder: str | os.PathLike, is_ours=lambda path: False,
                          advice: str = "choose a new or empty folder") -> None:
    """A ConfigError, one line naming a file, unless `folder` is absent, empty, or holds only files
    this tool wrote (`is_ours(path)` for each file in it, subfolders walked).

    For tools that write a whole tree of fixed names (a fixture dataset, a model folder): the names
    they write are the published ones (`aachen_000000_000019_leftImg8bit.png`, `README.md`), so a
    user's real file of that name would be replaced without this check."""
    folder = Path(os.path.expanduser(os.fspath(folder)))
    if not os.fspath(folder).strip():
        raise ConfigError(f"{option}: an empty path; name the folder to write into")
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{option} {os.fspath(folder)}: is a file, not a folder; {advice}")
    if not folder.is_dir():
        return
    for path in sorted(folder.rglob("*")):
        if (path.is_file() or path.is_symlink()) and not is_ours(path):
            raise ConfigError(f"{option} {os.fspath(folder)}: already holds {path.relative_to(folder)}, which this "
                              f"tool did not write; nothing is written over a file it did not create: {advice}")
