"""The floors of the semantic-synthesis table (docs/semantic-synthesis.md): what the segmenter
reads in images drawn without the textures, scored as the synthesis runs are scored: the
synthesis config's metrics (SegmenterScore, Diversity, SWD) on its val set, in its val batches.

- class-mean painting: each val label map painted with its class's mean colour over the train
  set. SyntheticTextures gives every class the same mean colour, so this is about one flat colour.
- pix2pix with L1 alone: pix2pix's UNetGenerator (the network and the generator's Adam and
  schedule of projects/pix2pix/configs/pix2pix_shapes.yaml) takes the label map as a colour image
  (default_palette), no noise, and is trained by L1 against the real image, in batches of the
  synthesis config's train batch size. The label map does not give a texture's phase, and L1's
  best guess at a pixel of unknown phase is the texture's median colour: close to a flat painting.

    python benchmarks/quality/synthesis_floors.py --segmenter-config configs/segmentation/unet_textures.yaml \\
        --segmenter-checkpoint work_dirs/unet_textures/checkpoints/best.pth [--iters 2000] [--seed 0] [--out floors.json]

Prints the segmenter's mIoU on the real val images and one markdown row per floor in the columns
of the docs' table; --out writes the same as JSON. CPU, seeded and deterministic.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from framework.config import import_custom_modules, load_config, to_plain  # noqa: E402
from framework.config.rules import integer  # noqa: E402
from framework.engine.random_state import seed_everything  # noqa: E402
from framework.errors import ConfigError  # noqa: E402
from framework.inference.generator import to_signed, to_unit  # noqa: E402
from framework.optim.optimizers import build_optimizers  # noqa: E402
from framework.registry import DATASETS, METRICS, MODELS  # noqa: E402
from framework.runtime.cli import check_options, run  # noqa: E402
from framework.visualization.palette import colorize, default_palette  # noqa: E402

SYNTHESIS_CONFIG = REPO / "configs" / "synthesis" / "oasis_textures.yaml"
PIX2PIX_CONFIG = REPO / "projects" / "pix2pix" / "configs" / "pix2pix_shapes.yaml"
SEGMENTER_SCORE = "SegmenterScore"


def stack_split(dataset) -> tuple[torch.Tensor, torch.Tensor]:
    """(N x 3 x H x W uint8 images, N x H x W class ids) of every sample, in index order."""
    samples = [dataset[index] for index in range(len(dataset))]
    return torch.stack([s["image"] for s in samples]), torch.stack([s["mask"] for s in samples]).long()


def class_mean_colours(images: torch.Tensor, labels: torch.Tensor, num_classes: int,
                       ignore_index: int) -> torch.Tensor:
    """num_classes x 3 mean RGB (0..255) of each class's pixels; a class with none gets the mean
    of all counted pixels, and so does the last row, kept for the ignored pixels."""
    pixels = images.movedim(1, -1).reshape(-1, 3).double()
    flat = labels.reshape(-1)
    counted = flat != ignore_index
    overall = pixels[counted].mean(dim=0)
    colours = overall.repeat(num_classes + 1, 1)
    for label in range(num_classes):
        inside = flat == label
        if inside.any():
            colours[label] = pixels[inside].mean(dim=0)
    return colours.float()


def paint_class_means(labels: torch.Tensor, colours: torch.Tensor, ignore_index: int) -> torch.Tensor:
    """N x 3 x H x W in [0, 1]: each pixel in its class's colour (`class_mean_colours`)."""
    index = labels.clone()
    index[labels == ignore_index] = len(colours) - 1
    return (colours[index] / 255).movedim(-1, 1)


def label_images(labels: torch.Tensor, num_classes: int, ignore_index: int) -> torch.Tensor:
    """The label maps as colour images in [-1, 1] (pix2pix's input): default_palette, ignored white."""
    palette = torch.from_numpy(default_palette(num_classes))
    return to_signed(colorize(labels, palette, ignore_index))


def epoch_batches(count: int, batch_size: int, draw: torch.Generator):
    """Index batches of endless epochs, each a fresh permutation, the last partial batch dropped
    (as the framework's train loader)."""
    if count < batch_size:
        raise ConfigError(f"data.train.batch_size: {batch_size} is more than the {count} training samples")
    while True:
        order = torch.randperm(count, generator=draw)
        for start in range(0, count - batch_size + 1, batch_size):
            yield order[start:start + batch_size]


class GeneratorOnly(nn.Module):
    """What build_optimizers claims parameters from: `params: generator` names this submodule."""

    def __init__(self, generator: nn.Module):
        super().__init__()
        self.generator = generator


def train_l1(generator: nn.Module, optimizer_node: dict, inputs: torch.Tensor, targets: torch.Tensor, iters: int,
             batch_size: int, seed: int) -> list[float]:
    """Train `generator` (inputs -> targets, both in [-1, 1]) by L1 alone; the loss of each iteration."""
    optim = build_optimizers({"optimizers": {"generator": optimizer_node}}, GeneratorOnly(generator), iters)
    optim.log_details = False  # no gradient norms: nothing logs them
    batches = epoch_batches(len(inputs), batch_size, torch.Generator().manual_seed(seed))
    generator.train()
    losses = []
    for _ in range(iters):
        chosen = next(batches)
        loss = F.l1_loss(generator(inputs[chosen]), targets[chosen])
        optim.update(loss, "generator")
        optim.end_iteration()
        optim.step_schedulers()
        losses.append(loss.item())
    return losses


@torch.no_grad()
def generate(generator: nn.Module, inputs: torch.Tensor, batch_size: int) -> torch.Tensor:
    """The generator's images in [0, 1] (eval mode), as the synthesis task's val_step gives them."""
    generator.eval()
    return torch.cat([to_unit(generator(part)) for part in inputs.split(batch_size)])


@torch.no_grad()
def mean_l1(generator: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, batch_size: int) -> float:
    """L1 between the generator's images and the targets over the whole set, on the [-1, 1] scale."""
    fakes = generate(generator, inputs, batch_size) * 2 - 1
    return F.l1_loss(fakes, targets).item()


def score(metrics: list, fakes: torch.Tensor, images: torch.Tensor, labels: torch.Tensor,
          batch_size: int) -> dict[str, float]:
    """Every metric over the val set in batches of `batch_size`, fed what SemanticSynthesisTask's
    val_step gives: without noise both draws are one image, so fake_alt is the fake."""
    values: dict[str, float] = {}
    for metric in metrics:
        metric.reset()
        for fake, image, label in zip(fakes.split(batch_size), images.split(batch_size), labels.split(batch_size)):
            metric.update({"fake": fake, "fake_alt": fake, "real": to_unit(to_signed(image)), "labels": label})
        values.update(metric.compute())
    return values


def build_metrics(nodes: list[dict], segmenter_config: str, segmenter_checkpoint: str) -> list:
    """The synthesis config's metrics, its SegmenterScore pointed at the given segmenter run."""
    metrics = []
    for position, node in enumerate(nodes):
        if node.get("type") == SEGMENTER_SCORE:
            node = {**node, "config": segmenter_config, "checkpoint": segmenter_checkpoint}
        metrics.append(METRICS.build(node, path=f"metrics[{position}]"))
    if not any(node.get("type") == SEGMENTER_SCORE for node in nodes):
        raise ConfigError(f"metrics: the synthesis config names no {SEGMENTER_SCORE}: nothing scores the floors")
    return metrics


def measure_floors(synthesis: dict, pix2pix: dict, metrics: list, iters: int, seed: int) -> dict:
    """{"class_mean_painting": values, "pix2pix_l1": values + training}; the configs as plain dicts."""
    num_classes, ignore_index = synthesis["task"]["num_classes"], synthesis["task"].get("ignore_index", 255)
    data = synthesis["data"]
    train_images, train_labels = stack_split(DATASETS.build(data["train"]["dataset"], path="data.train.dataset"))
    val_images, val_labels = stack_split(DATASETS.build(data["val"]["dataset"], path="data.val.dataset"))
    val_batch = data["val"]["batch_size"]

    colours = class_mean_colours(train_images, train_labels, num_classes, ignore_index)
    painting = paint_class_means(val_labels, colours, ignore_index)
    floors = {"class_mean_painting": {**score(metrics, painting, val_images, val_labels, val_batch),
                                      "colours": colours[:num_classes].tolist()}}

    seed_everything(seed, deterministic=True)
    generator = MODELS.build(pix2pix["task"]["generator"], path="task.generator")
    inputs, targets = label_images(train_labels, num_classes, ignore_index), to_signed(train_images)
    l1_before = mean_l1(generator, inputs, targets, val_batch)
    losses = train_l1(generator, pix2pix["optimizers"]["generator"], inputs, targets, iters,
                      data["train"]["batch_size"], seed)
    fakes = generate(generator, label_images(val_labels, num_classes, ignore_index), val_batch)
    floors["pix2pix_l1"] = {**score(metrics, fakes, val_images, val_labels, val_batch), "iters": iters, "seed": seed,
                            "train_l1_before": l1_before, "train_l1_after": mean_l1(generator, inputs, targets, val_batch),
                            "last_batch_l1": losses[-1] if losses else None}
    return floors


def table(floors: dict, generator_node: dict) -> list[str]:
    """Markdown rows in the columns of docs/semantic-synthesis.md's table."""
    painting, l1 = floors["class_mean_painting"], floors["pix2pix_l1"]
    width = f"UNetGenerator base_channels {generator_node.get('base_channels')}"
    rows = [("floor: class-mean painting", "none (train-set class means)", painting),
            (f"floor: pix2pix, L1 only ({width})", f"{l1['iters']} iterations, seed {l1['seed']}", l1)]
    lines = ["| config | training | segmenter mIoU on fakes | x real | pixel acc. on fakes | Diversity | SWD |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, training, values in rows:
        cells = [f"{values[key]:{digits}}" if key in values else "-"  # a metric the synthesis config lacks
                 for key, digits in (("mIoU_fake", ".3f"), ("mIoU_ratio", ".3f"), ("aAcc_fake", ".3f"),
                                     ("Diversity", ".3f"), ("SWD", ".1f"))]
        lines.append(f"| {name} | {training} | {' | '.join(cells)} |")
    return lines


def parse_args() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segmenter-config", required=True, help="the segmentation run's config")
    parser.add_argument("--segmenter-checkpoint", required=True, help="its checkpoint (e.g. checkpoints/best.pth)")
    parser.add_argument("--iters", type=int, default=2000, help="L1 training iterations of the pix2pix generator")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--base-channels", type=int, default=None,
                        help="the generator's width (default: the pix2pix config's)")
    parser.add_argument("--synthesis-config", default=str(SYNTHESIS_CONFIG),
                        help="data, num_classes and metrics of the synthesis runs")
    parser.add_argument("--pix2pix-config", default=str(PIX2PIX_CONFIG),
                        help="the pix2pix generator and its optimizer")
    parser.add_argument("--out", default=None, help="write the floors as JSON here")
    return parser


def main(args: argparse.Namespace) -> int:
    check_options({"--iters": (args.iters, integer(1)), "--seed": (args.seed, integer(0)),
                   "--base-channels": (args.base_channels, integer(1))})
    if args.out and not Path(args.out).resolve().parent.is_dir():
        raise ConfigError(f"--out: the folder of {args.out} does not exist")
    for option, path in (("--segmenter-config", args.segmenter_config), ("--segmenter-checkpoint", args.segmenter_checkpoint),
                         ("--synthesis-config", args.synthesis_config), ("--pix2pix-config", args.pix2pix_config)):
        if not os.path.isfile(path):
            raise ConfigError(f"{option}: file not found: {path}")
    synthesis, pix2pix_cfg = to_plain(load_config(args.synthesis_config)), load_config(args.pix2pix_config)
    import_custom_modules(pix2pix_cfg)  # registers pix2pix's networks
    pix2pix = to_plain(pix2pix_cfg)
    if args.base_channels is not None:
        pix2pix["task"]["generator"]["base_channels"] = args.base_channels
    # The segmenter first: a wrong path is refused before any training.
    metrics = build_metrics(synthesis.get("metrics") or [], args.segmenter_config, args.segmenter_checkpoint)
    floors = measure_floors(synthesis, pix2pix, metrics, args.iters, args.seed)
    real = floors["class_mean_painting"]["mIoU_real"]
    print(f"segmenter {args.segmenter_checkpoint}: mIoU {real:.4f} on the real val images")
    print("\n".join(table(floors, pix2pix["task"]["generator"])))
    if args.out:
        report = {"segmenter_config": args.segmenter_config, "segmenter_checkpoint": args.segmenter_checkpoint,
                  "synthesis_config": args.synthesis_config, "pix2pix_config": args.pix2pix_config,
                  "generator": pix2pix["task"]["generator"], "optimizer": pix2pix["optimizers"]["generator"],
                  "floors": floors}
        partial = Path(f"{args.out}.partial")
        partial.write_text(json.dumps(report, indent=2) + "\n")
        partial.replace(args.out)  # whole or not at all
    return 0


if __name__ == "__main__":
    sys.exit(run(main, parse_args()))
