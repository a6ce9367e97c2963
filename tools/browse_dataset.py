"""See what the data pipeline really feeds the network: augmented training samples as PNG grids.

    python tools/browse_dataset.py --config CFG --output DIR [--split train|val] [--num 16]
        [--rows 8] [key=value ...]

Samples come from the same loader training uses (sampler order, per-sample augmentation seeds,
the first epoch), so a grid shows exactly the batches of the first iterations. Each row is
one sample: image | mask | overlay for segmentation, otherwise the sample's images side by side
(input | target for pix2pix pairs, A | B for CycleGAN's unpaired domains, the image alone for DCGAN). Grids are written as <output>/grid_000.png, grid_001.png, ...
Training's rule that a split holds at least one batch is not applied: a tree of fewer samples than
data.train.batch_size (a fixture tree) is shown, its incomplete batch kept.
"""

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from framework.config import import_custom_modules, load_config, to_plain
from framework.config.rules import integer
from framework.data.loader import build_dataloader
from framework.data.sources import folders_read_by
from framework.errors import ConfigError
from framework.runtime.cli import MAX_BATCH, MAX_IMAGES, check_options, given_path, output_folder, run
from framework.runtime.overwrite import refuse_writing_over_inputs
from framework.visualization.masks import overlay, write_rgb
from framework.visualization.palette import colorize


def parse_args() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, type=given_path, help="YAML config file")
    parser.add_argument("--output", required=True, type=output_folder, help="folder for the grids")
    parser.add_argument("--split", default="train", help="data section: train (augmented) or val")
    parser.add_argument("--num", type=int, default=16, help="samples to show")
    parser.add_argument("--rows", type=int, default=8, help="samples per grid")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    return parser


def rows_of(batch: dict, dataset) -> list[np.ndarray]:
    """One H x (k*W) x 3 uint8 row per sample of the batch."""
    def hwc(images: torch.Tensor) -> np.ndarray:
        return images.permute(0, 2, 3, 1).numpy()

    if "mask" in batch:
        palette = torch.tensor(np.array(dataset.palette), dtype=torch.uint8)
        images, masks = hwc(batch["image"]), batch["mask"]
        colours = hwc(colorize(masks, palette, dataset.ignore_index))
        blends = [overlay(i, m, palette.numpy()) for i, m in zip(images, masks.numpy())]
        return [np.concatenate(parts, axis=1) for parts in zip(images, colours, blends)]
    # Every RGB image of the sample, in the dataset's key order: whatever a GAN dataset names them
    images = [hwc(value) for value in batch.values() if isinstance(value, torch.Tensor) and value.dim() == 4
              and value.dtype == torch.uint8 and value.shape[1] == 3]
    if not images:
        raise ConfigError(f"{type(dataset).__name__}: its samples hold no N x 3 x H x W uint8 images "
                          f"(keys: {', '.join(batch)}); browse_dataset shows images and class masks")
    return [np.concatenate(parts, axis=1) for parts in zip(*images)]


def grid_file(output: Path, number: int) -> Path:
    return output / f"grid_{number:03d}.png"


def main(args: argparse.Namespace) -> None:
    check_options({"--num": (args.num, integer(1, max=MAX_IMAGES)), "--rows": (args.rows, integer(1, max=MAX_BATCH))})
    cfg = load_config(args.config, args.overrides)
    import_custom_modules(cfg)
    plain = to_plain(cfg)
    section = plain["data"].get(args.split)
    if not section:
        raise ConfigError(f"data.{args.split}: the config has no such data section")
    loader = build_dataloader(section, f"data.{args.split}", train=args.split == "train", seed=plain["seed"],
                              browsing=True)  # a tree smaller than a training batch is still shown
    output = Path(args.output)
    grids = [grid_file(output, number) for number in range(-(-args.num // args.rows))]
    data = [(f"data.{args.split}.dataset", folder) for folder in folders_read_by(loader.dataset)]
    refuse_writing_over_inputs("--output", output, data, grids, other_reads=[("--config", args.config)])
    rows: list[np.ndarray] = []
    for batch in loader:
        rows += rows_of(batch, loader.dataset)
        if len(rows) >= args.num:
            break
    rows = rows[: args.num]
    output.mkdir(parents=True, exist_ok=True)
    for number, first in enumerate(range(0, len(rows), args.rows)):
        write_rgb(grid_file(output, number), np.concatenate(rows[first:first + args.rows], axis=0))
    print(f"{len(rows)} samples in {number + 1} grid(s) -> {output}")


if __name__ == "__main__":
    sys.exit(run(main, parse_args()))
