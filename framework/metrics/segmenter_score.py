"""SegmenterScore: how well a trained segmenter recognises the label map in generated images.

The usual measure of semantic image synthesis (SPADE, OASIS): segment the generated image with
a fixed segmenter and compare with the label map it was generated from. Here the segmenter is a
segmentation run of this framework: its config file and a checkpoint (local paths only). The
metric builds the network from the config's `task.model` node, loads the checkpoint's `model.*`
weights (a training checkpoint's `task` state, as tools/train.py writes it), normalises with the
task's `mean`/`std` and predicts whole images (argmax; a 1-output binary model: logit > 0).

It reads `outputs["fake"]` and `outputs["real"]` (N x 3 x H x W floats in [0, 1]) and
`outputs["labels"]` (N x H x W class ids) and reports, from one confusion matrix each:
`mIoU_fake`/`aAcc_fake` on the fakes, `mIoU_real`/`aAcc_real` on the real images (the
bound a perfect generator would reach with this segmenter) and `mIoU_ratio` (fake / real).
Protocol: the images at the resolution they are generated, labels of another size resized to
them (nearest), pixels of `ignore_index` skipped; logged once at the first evaluation.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch
import torch.nn.functional as F
import yaml

from framework.config import import_custom_modules, load_config, to_plain
from framework.errors import CheckpointError, ConfigError
from framework.metrics.base import Metric
from framework.metrics.image import IMAGENET_MEAN, IMAGENET_STD
from framework.metrics.segmentation import SegmentationMetrics
from framework.models.spade import resize_labels
from framework.registry import METRICS, MODELS
from framework.serialization.weights_file import read_weights_file

logger = logging.getLogger("framework")

SEGMENTATION_TASK = "SegmentationTask"
# Keys a model node may carry for training (engine/network_settings.py): nothing to do with predicting.
TRAINING_ONLY_KEYS = ("init", "frozen", "norm_eval")
RESULT_NAMES = ("mIoU_fake", "aAcc_fake", "mIoU_real", "aAcc_real", "mIoU_ratio")


def build_segmenter(config: str, checkpoint: str, num_classes: int) -> tuple[torch.nn.Module, dict]:
    """(network in eval mode with the checkpoint's weights, its task node) of a segmentation run."""
    for what, path in (("config", config), ("checkpoint", checkpoint)):
        if not os.path.isfile(path):
            raise ConfigError(f"{what}: segmenter {what} file not found: {path}")
    cfg = load_config(config)
    import_custom_modules(cfg)
    task = to_plain(cfg)["task"]
    if task.get("type") != SEGMENTATION_TASK:
        raise ConfigError(f"config: {config} is not a segmentation run (task.type {task.get('type')!r}, "
                          f"expected {SEGMENTATION_TASK})")
    if task.get("num_classes") != num_classes:
        raise ConfigError(f"num_classes: the segmenter of {config} has {task.get('num_classes')} classes, "
                          f"the synthesis {num_classes}; score with a segmenter of the same classes")
    node = {k: v for k, v in task["model"].items() if k not in TRAINING_ONLY_KEYS}
    network = MODELS.build(node, path=f"{config}: task.model")
    state = read_weights_file(checkpoint)
    trained = trained_classes(state)
    if trained is not None and trained != num_classes:
        raise CheckpointError(f"checkpoint: {checkpoint} is a segmenter of {trained} classes (task.num_classes of the "
                              f"config saved in it), the synthesis has {num_classes}; score with a segmenter trained "
                              "on the synthesis classes")
    state = state.get("task", state)  # a training checkpoint, or a task state dict saved alone
    weights = {k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")}
    if not weights:
        raise CheckpointError(f"{checkpoint} holds no model.* weights of a segmentation task")
    try:
        missing, unexpected = network.load_state_dict(weights, strict=False)
    except RuntimeError as err:  # shapes differ
        detail = next((line.strip() for line in str(err).splitlines() if "size mismatch" in line), str(err))
        outputs = other_output_count(network, weights, node.get("num_classes"))
        if outputs is not None:
            detail = (f"its output layer has {outputs} outputs, task.model.num_classes is {node['num_classes']}: "
                      f"the checkpoint is of a segmenter of another class count ({detail})")
        raise CheckpointError(f"{checkpoint} does not fit the model of {config}: {detail}") from err
    if missing or unexpected:
        raise CheckpointError(f"{checkpoint} does not fit the model of {config}: missing {missing[:3]}, "
                              f"unexpected {unexpected[:3]}")
    return network.eval().requires_grad_(False), task


def trained_classes(state: dict) -> int | None:
    """task.num_classes of the config a training checkpoint saved (meta.config); None without one."""
    meta = state.get("meta")
    text = meta.get("config") if isinstance(meta, dict) else None
    try:
        task = (yaml.safe_load(text) or {}).get("task") if isinstance(text, str) else None
    except (yaml.YAMLError, AttributeError):  # not a config, or not a mapping
        return None
    classes = task.get("num_classes") if isinstance(task, dict) else None
    return classes if isinstance(classes, int) else None


def other_output_count(network: torch.nn.Module, weights: dict, outputs: int | None) -> int | None:
    """The checkpoint's output count when the only tensors that do not fit `network` are its output
    layer's, with another count in their first dimension (a segmenter of other classes); else None."""
    own = network.state_dict()
    differing = [(tuple(value.shape), tuple(own[key].shape)) for key, value in weights.items()
                 if key in own and tuple(own[key].shape) != tuple(value.shape)]
    if outputs is None or not differing or any(theirs[1:] != ours[1:] or ours[0] != outputs
                                               for theirs, ours in differing):
        return None
    counts = {theirs[0] for theirs, _ in differing}
    return counts.pop() if len(counts) == 1 else None


@METRICS.register()
class SegmenterScore(Metric):
    """mIoU and pixel accuracy of a trained segmenter on generated images, and on real ones."""

    def __init__(self, config: str, checkpoint: str, num_classes: int, ignore_index: int = 255):
        super().__init__()
        self.config, self.checkpoint = os.path.expanduser(str(config)), os.path.expanduser(str(checkpoint))
        self.network, task = build_segmenter(self.config, self.checkpoint, num_classes)
        self.num_classes, self.ignore_index = num_classes, ignore_index
        self.mean = torch.tensor(task.get("mean", IMAGENET_MEAN), dtype=torch.float32).view(1, -1, 1, 1)
        self.std = torch.tensor(task.get("std", IMAGENET_STD), dtype=torch.float32).view(1, -1, 1, 1)
        self.on_fakes = SegmentationMetrics(num_classes, ignore_index)
        self.on_reals = SegmentationMetrics(num_classes, ignore_index)
        self.protocol_logged = False

    def states(self) -> dict[str, torch.Tensor]:
        return {"fake_confusion": self.on_fakes.confusion, "real_confusion": self.on_reals.confusion}

    def reset(self) -> None:
        self.on_fakes.reset()
        self.on_reals.reset()

    def to(self, device: torch.device | str) -> SegmenterScore:
        self.on_fakes.to(device)
        self.on_reals.to(device)
        self.network.to(device)
        self.mean, self.std = self.mean.to(device), self.std.to(device)
        return self

    def use_dataset(self, dataset, path: str, dataset_path: str) -> None:
        names = getattr(dataset, "class_names", None)
        if names is not None and len(names) != self.num_classes:
            raise ConfigError(f"{path}.num_classes: {self.num_classes}, but {dataset_path} has {len(names)} classes")

    @torch.no_grad()
    def predict(self, images: torch.Tensor) -> torch.Tensor:
        """N x H x W class ids the segmenter sees in `images` (floats in [0, 1])."""
        logits = self.network((images.float() - self.mean) / self.std)
        if logits.shape[-2:] != images.shape[-2:]:
            logits = F.interpolate(logits, size=images.shape[-2:], mode="bilinear", align_corners=False)
        return (logits[:, 0] > 0).long() if logits.shape[1] == 1 else logits.argmax(dim=1)

    def update(self, outputs: dict[str, Any]) -> None:
        missing = [key for key in ("fake", "real", "labels") if key not in outputs]
        if missing:
            raise ValueError(f"SegmenterScore needs {', '.join(missing)} in the task's evaluation outputs "
                             f"(they have: {', '.join(sorted(outputs))})")
        fake, real, labels = outputs["fake"], outputs["real"], outputs["labels"]
        if self.network_device() != fake.device:
            self.to(fake.device)
        labels = resize_labels(labels, fake.shape[-2:])
        if not self.protocol_logged:
            self.protocol_logged = True
            logger.info(f"SegmenterScore: {self.config} with {self.checkpoint}, whole images at "
                        f"{fake.shape[-2]}x{fake.shape[-1]} as generated, labels resized to them (nearest) where "
                        f"sizes differ, pixels of ignore_index {self.ignore_index} skipped")
        self.on_fakes.update({"pred": self.predict(fake), "target": labels})
        self.on_reals.update({"pred": self.predict(real), "target": labels})

    def network_device(self) -> torch.device:
        return next(self.network.parameters()).device

    def result_names(self) -> list[str]:
        return list(RESULT_NAMES)

    def compute(self) -> dict[str, float]:
        fakes, reals = self.on_fakes.compute(), self.on_reals.compute()
        ratio = fakes["mIoU"] / reals["mIoU"] if reals["mIoU"] > 0 else float("nan")
        return dict(zip(RESULT_NAMES, (fakes["mIoU"], fakes["aAcc"], reals["mIoU"], reals["aAcc"], ratio)))
