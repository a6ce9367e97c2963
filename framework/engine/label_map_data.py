"""Start-up checks of the data a task conditioned on label maps trains and is evaluated on
(GeneratorTask.conditioning "labels": semantic synthesis, framework/tasks/synthesis.py).

Such a task one-hot encodes every mask with its own class count, and its generator draws images
of its own size. A segmentation run meets a bad mask when a worker reads it, iterations in (the
first evaluation, after a checkpoint); here each mistake is one line before any file of the run
is written (tools/train.py: before config.yaml, checkpoints and TensorBoard files; tools/test.py:
before metrics.json and the first image of --show-dir):

- the dataset's classes and ignore label are the task's (`task.num_classes`, `task.ignore_index`):
  a mask value the dataset allows and the task does not would index past the one-hot map;
- the instance edges: the samples carry "edges" (a dataset's `instance_edges: true`) exactly when
  the task appends them (`task.instance_edges`); edges computed and never read, or read and never
  there, are one line naming both keys;
- the size of a sample after the pipeline (sample 0, as evaluation reads it; the training
  samples have one size, engine/startup_check.py checked two): for training, the generator's
  `image_size`; for evaluation, any size its depth allows (the generator is convolutional and
  evaluation draws at the data's size, but a side that is no multiple of 2**num_up_layers
  fails in its first resize);
- every label map of a dataset read from files (one with `image_path`: the folder datasets),
  read once in the loader's worker processes (analysis/dataset_scan.py's `check_label_maps`):
  values outside the classes other than the ignore label, and a size other than its image's.
  Every process reads them all: each refuses with the same line. A generated dataset's maps
  (SyntheticTextures) come from its code, not from files a user drew: each sample's own check
  still names a bad one when it is read, and start-up does not render them all.
"""

from __future__ import annotations

import torch

from framework.analysis.dataset_scan import check_label_maps
from framework.errors import ConfigError
from framework.inference.settings import network_size_divisor

MAX_CLASS_NAMES_SHOWN = 8


def conditioned_on_labels(task) -> bool:
    return getattr(task, "conditioning", None) == "labels"


def check_label_map_data(task, loader, path: str, training: bool) -> None:
    """The checks above on `loader`'s dataset (config path `path`, e.g. "data.train"); nothing for
    a task not conditioned on label maps. `training`: held to the generator's image_size."""
    if not conditioned_on_labels(task):
        return
    dataset, where = loader.dataset, f"{path}.dataset"
    check_classes(task, dataset, where)
    sample = dataset[0] if len(dataset) else None
    if not isinstance(sample, dict) or not isinstance(sample.get("image"), torch.Tensor):
        sample = None  # a custom dataset's own sample format: left to the first step
    check_instance_edges(task, sample, where)
    check_sample_size(task.generator_for(), sample, where, training)
    if hasattr(dataset, "image_path"):
        check_label_maps(dataset, workers=loader.num_workers, where=where)


def check_classes(task, dataset, where: str) -> None:
    names = getattr(dataset, "class_names", None)
    if names is not None and len(names) != task.num_classes:
        shown = ", ".join(names[:MAX_CLASS_NAMES_SHOWN]) + (", ..." if len(names) > MAX_CLASS_NAMES_SHOWN else "")
        raise ConfigError(f"{where}: {len(names)} classes ({shown}), task.num_classes {task.num_classes}: the label "
                          "maps must have the classes the generator is built for; give both the same classes")
    ignore_index = getattr(dataset, "ignore_index", None)
    if ignore_index is not None and ignore_index != task.ignore_index:
        raise ConfigError(f"{where}.ignore_index: {ignore_index}, task.ignore_index {task.ignore_index}: the "
                          "don't-care label must be the same in both")


def check_instance_edges(task, sample: dict | None, where: str) -> None:
    """The one decision on SPADE's instance-edge channel: the task's `instance_edges` (its generator's
    too, tasks/synthesis_options.py) against what the samples carry (`where`.instance_edges)."""
    if sample is None:
        return
    wanted, carried = bool(getattr(task, "instance_edges", False)), "edges" in sample
    if wanted == carried:
        return
    if carried:
        raise ConfigError(f"{where}.instance_edges: true, task.instance_edges: false: the edges would be computed "
                          "and never read, the run training without them; set task.instance_edges: true (and "
                          f"task.generator.instance_edges: true), or {where}.instance_edges: false")
    raise ConfigError(f"task.instance_edges: true, but the samples of {where} carry no instance edges: set "
                      f"{where}.instance_edges: true (Cityscapes with labels: synthesis), or task.instance_edges: "
                      "false")


def check_sample_size(generator, sample: dict | None, where: str, training: bool) -> None:
    if sample is None:
        return
    height, width = (int(side) for side in sample["image"].shape[-2:])
    seen = f"{where}: samples are {height}x{width} after the pipeline (sample {sample.get('name', 0)})"
    divisor = network_size_divisor(generator)
    fits = height % divisor == 0 and width % divisor == 0 and height > 0 and width > 0
    depth = (f"task.generator.num_up_layers {generator.num_up_layers}: both sides must be multiples of "
             f"2**num_up_layers = {divisor}" if hasattr(generator, "num_up_layers")
             else f"both sides must be multiples of the generator's {divisor}")
    image_size = getattr(generator, "image_size", None)
    if training and image_size is not None and (height, width) != tuple(image_size):
        wanted = f"{image_size[0]}x{image_size[1]}"
        if not fits:
            raise ConfigError(f"{seen}, task.generator.image_size is {wanted}, and {height}x{width} is no size the "
                              f"generator draws ({depth}): resize or crop them to {wanted} in {where}.pipeline")
        raise ConfigError(f"{seen}, task.generator.image_size is {wanted}: resize or crop them to it in "
                          f"{where}.pipeline, or set task.generator.image_size: [{height}, {width}]")
    if not fits:
        raise ConfigError(f"{seen}, a size the generator cannot draw ({depth}): resize or crop them to such a "
                          f"size in {where}.pipeline")
