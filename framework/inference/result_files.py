"""What tools/infer.py writes, named in one place: the writers (framework/api/file_runs.py) take
their file names from here, and the check that no result lands on an input
(framework/runtime/overwrite.py) is handed the same list before anything is written.

    segmentation        <output>/masks/<name>.png and <output>/overlays/<name>.png
    image to image      <output>/<name>.png
    label maps          <output>/<name>.png, or <name>_<k>.png for draw k of several (--samples)
    from noise          <output>/sample_<i>.png (four digits at least)
    saliency            <output>/saliency/<name>.png besides (--saliency)

<name> is the input's file name without its suffix.
"""

from __future__ import annotations

import os
from pathlib import Path

from framework.errors import ConfigError


def distinct_inputs(paths: list[Path]) -> list[Path]:
    """The inputs once each; refused when two different files would write the same result
    (`<name>.png` comes from the file name without its suffix: one/x.png, one/x.jpg, two/x.png)."""
    unique = list(dict.fromkeys(Path(os.path.abspath(p)) for p in paths))  # one file named twice: read once
    by_stem: dict[str, list[Path]] = {}
    for path in unique:
        by_stem.setdefault(path.stem, []).append(path)
    clashes = {stem: found for stem, found in by_stem.items() if len(found) > 1}
    if clashes:
        stem, found = next(iter(clashes.items()))
        more = f" (and {len(clashes) - 1} more names)" if len(clashes) > 1 else ""
        raise ConfigError(f"--input: {', '.join(map(str, found))} would all be written as {stem}.png{more}; "
                          "give them in separate runs with different --output folders, or rename them")
    return unique


def segmentation_files(output: Path, input_path: Path) -> tuple[Path, Path]:
    """(the palette mask, the overlay) of one input image."""
    return output / "masks" / f"{input_path.stem}.png", output / "overlays" / f"{input_path.stem}.png"


def translation_file(output: Path, input_path: Path) -> Path:
    return output / f"{input_path.stem}.png"


def draw_file(output: Path, input_path: Path, draw: int, samples: int) -> Path:
    """Draw `draw` of `samples` from one label map."""
    return output / (f"{input_path.stem}.png" if samples == 1 else f"{input_path.stem}_{draw}.png")


def saliency_file(output: Path, input_path: Path) -> Path:
    """An input's saliency map over the image (tools/infer.py --saliency)."""
    return output / "saliency" / f"{input_path.stem}.png"


def sample_file(output: Path, index: int) -> Path:
    return output / f"sample_{index:04d}.png"
