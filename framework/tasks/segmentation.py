"""Semantic segmentation: one network, one (possibly combined) loss, one optimizer."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from framework.errors import ConfigError
from framework.inference.export import NormalizedSegmenter
from framework.inference.segmentation import SegmentationPredictor, pad_to_multiple
from framework.inference.settings import InferenceSettings, network_size_divisor
from framework.models.aux_head import LogitsWithAux
from framework.registry import TASKS
from framework.tasks.base import Task, total_loss
from framework.visualization.palette import colorize, default_palette
from framework.visualization.panels import side_by_side, stack_rows, write_named_pngs


def displayable(image: torch.Tensor) -> torch.Tensor:
    """N x C x H x W images on the 0..255 scale as uint8 RGB: the first three channels, or the
    first one as grey when there are fewer (N-channel data, framework/data/channels.py)."""
    image = image[:, :3] if image.shape[1] >= 3 else image[:, :1].expand(-1, 3, -1, -1)
    return image if image.dtype == torch.uint8 else image.clamp(0, 255).to(torch.uint8)


@TASKS.register()
class SegmentationTask(Task):
    """Images arrive as uint8 RGB (N x 3 x H x W) and are normalised here, on the device.
    N-channel data (uint8 or float32 on the 0..255 scale) takes one mean and std per channel.

    `mean`/`std` are on the 0..1 scale (ImageNet's by default). A model with one output
    channel is a binary segmenter: prediction = logit > 0, so metrics see 2 classes.
    `inference` (framework/inference/settings.py: whole or slide, flip, scales) is how `predict`
    runs, in validation, tools/test.py and tools/infer.py alike.
    """

    def __init__(self, model: nn.Module, loss: nn.Module, num_classes: int, ignore_index: int = 255,
                 mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), class_names=None, palette=None,
                 inference: dict | None = None):
        super().__init__()
        self.model = model
        self.loss = loss
        # Decided once: a missing attribute costs an exception inside nn.Module.__getattr__ per step.
        self._loss_has_terms = hasattr(loss, "terms")
        self._loss_key = f"loss_{getattr(loss, 'name', 'seg')}"
        # A network with an auxiliary head (framework/models/aux_head.py) returns LogitsWithAux in training.
        self.aux_loss_weight = float(getattr(model, "aux_loss_weight", 0.0))
        self.num_classes = num_classes
        self.ignore_index = ignore_index
        self.inference = InferenceSettings.from_config(inference)
        self.class_names = list(class_names) if class_names else [str(i) for i in range(num_classes)]
        palette = torch.tensor(palette, dtype=torch.uint8) if palette else torch.from_numpy(default_palette(num_classes))
        # Buffers follow .to(device) but are not part of the state dict (not weights).
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1) * 255, persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1) * 255, persistent=False)
        self.register_buffer("palette", palette, persistent=False)

    @property
    def in_channels(self) -> int:
        """The channels of the images the model takes (3 for RGB; N-channel data: one mean each)."""
        return int(self.mean.shape[1])

    def normalize(self, image: torch.Tensor) -> torch.Tensor:
        # float64 pixels stay float64 (saliency's finite-difference check); uint8 becomes float32 (a dtype test,
        # not torch.promote_types: that is an operator call every step)
        return ((image if image.dtype == torch.float64 else image.float()) - self.mean) / self.std

    def loss_terms(self, logits: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
        if self._loss_has_terms:
            return self.loss.terms(logits, target)
        return {self._loss_key: self.loss(logits, target)}

    def train_step(self, batch: dict, optim) -> dict:
        output = self.model(self.normalize(batch["image"]))
        if isinstance(output, LogitsWithAux):
            terms = self.loss_terms(output.logits, batch["mask"])
            terms["loss_aux"] = self.aux_loss_weight * total_loss(self.loss_terms(output.aux_logits, batch["mask"]))
        else:
            terms = self.loss_terms(output, batch["mask"])
        loss = total_loss(terms)
        optim.update(loss)
        logs = {"loss": loss.detach()}
        if len(terms) > 1:
            logs.update({k: v.detach() for k, v in terms.items()})
        return logs

    def predictor(self, settings: InferenceSettings | None = None) -> SegmentationPredictor:
        return SegmentationPredictor(self.model, settings or self.inference, self.normalize)

    def predict(self, image: torch.Tensor) -> torch.Tensor:
        return self.predictor().predict(image)

    def class_index(self, target) -> int:
        """A class given by its name or id (an int, or its digits from the command line)."""
        if isinstance(target, str) and target in self.class_names:
            return self.class_names.index(target)
        index = int(target) if isinstance(target, str) and target.isdigit() else target
        if isinstance(index, (int, np.integer)) and not isinstance(index, bool) and 0 <= index < self.num_classes:
            return int(index)
        raise ConfigError(f"saliency target {target!r}: not a class of this model; its classes are "
                          f"{', '.join(f'{i} {name}' for i, name in enumerate(self.class_names))}")

    def saliency_score(self, target, direction: str | None = None, settings: InferenceSettings | None = None,
                       discriminator_loaded: bool = True):
        """Pixels (N x C x H x W, 0..255) -> the class `target`'s logits N x H x W at the pixels' size,
        through the `inference` settings (or `settings`). A binary segmenter's one logit scores
        class 1; class 0 is scored by its negative. (No discriminator: `discriminator_loaded` is moot.)"""
        self.refuse_direction(direction)
        index = self.class_index(target)
        predictor = self.predictor(settings)

        def class_logits(pixels: torch.Tensor) -> torch.Tensor:
            logits = predictor.differentiable_logits(pixels)
            if logits.shape[1] == 1:
                return logits[:, 0] if index == 1 else -logits[:, 0]
            return logits[:, index]

        return class_logits

    def network_examples(self, height: int, width: int) -> dict[str, tuple[nn.Module, tuple]]:
        """The model on what it sees after normalisation, padded to its size divisor."""
        image = pad_to_multiple(torch.randn(1, self.mean.shape[1], height, width), network_size_divisor(self.model))
        return {"model": (self.model, (image,))}

    def deployable(self, direction: str | None = None) -> tuple[nn.Module, str, int]:
        """The model with the normalisation inside: 0..255 images in, logits out."""
        self.refuse_direction(direction)
        divisor = self.predictor().size_divisor  # the one infer pads to (inference.size_divisor)
        return NormalizedSegmenter(self.model, self.mean, self.std, divisor).eval(), "image", divisor

    def refuse_direction(self, direction: str | None) -> None:
        if direction is not None:
            raise ConfigError(f"--direction: {type(self).__name__} has no generators; --direction is for a task "
                              "that translates both ways (CycleGANTask)")

    def val_step(self, batch: dict) -> dict:
        return {"pred": self.predict(batch["image"]), "target": batch["mask"]}

    def visualize(self, batch: dict, outputs: dict, max_images: int) -> dict:
        """One grid: a row per sample of image | ground truth | prediction."""
        return {"predictions": stack_rows(self._panels(batch, outputs), max_images).float() / 255}

    def save_visuals(self, batch: dict, outputs: dict, folder) -> None:
        """For each image: <name>.png with image | ground truth | prediction, colour-coded."""
        write_named_pngs(folder, batch["name"], self._panels(batch, outputs))

    def _panels(self, batch: dict, outputs: dict) -> torch.Tensor:
        truth = colorize(outputs["target"], self.palette, self.ignore_index)
        pred = colorize(outputs["pred"], self.palette, None)
        return side_by_side(displayable(batch["image"]), truth, pred)
