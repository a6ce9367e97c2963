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
                               reads: Iterable[tuple[str, str | os.PathLike]],
                               writes: Iterable[str | os.PathLike] = (), output_is_folder: bool = True) -> None:
    """A ConfigError, one line naming both paths, when writing would replace a file read.

    `reads`: (how the user named it, e.g. "--input" or "data.val.dataset", path) for every file and
    folder the tool reads; `writes`: every file it will write (under `output` when that is a folder).
    Refused: an output folder that is a folder read or directly holds a file read (whatever the
    tool names its results, they land beside the inputs), and any written file that is a file read
    (an output folder above an input folder whose results' subfolder has the input folder's name,
    a symlink in the output folder to an input)."""
    read_at: dict[Path, tuple[str, str]] = {}
    for label, path in reads:
        read_at.setdefault(resolved(path), (label, os.fspath(path)))
    where = resolved(output)
    if output_is_folder:
        for read, (label, path) in read_at.items():
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
