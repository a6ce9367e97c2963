"""Semantic segmentation metrics from a confusion matrix accumulated on the device."""

from __future__ import annotations

from typing import Any

import torch

from framework.errors import ConfigError
from framework.metrics.base import Metric
from framework.registry import METRICS
from framework.visualization.heatmap import heatmap


@METRICS.register()
class SegmentationMetrics(Metric):
    """mIoU, mAcc, aAcc and per-class IoU / Acc, as fractions in [0, 1].

    Reads `outputs["pred"]` and `outputs["target"]` (N x H x W int64 class ids; target pixels
    equal to `ignore_index` are skipped). Predictions must be class ids in [0, num_classes).

    Keys: `mIoU`, `mAcc`, `aAcc`, `IoU.<class>`, `Acc.<class>`. Class names: the evaluation
    dataset's (`class_names` of a SegmentationDataset); given here, they must equal the dataset's;
    "0", "1", ... when neither has them.
    - IoU.c = TP / (TP + FP + FN); Acc.c = TP / (TP + FN) (per-class recall); aAcc = correct / all pixels.
    - A class with no pixels in the ground truth AND none in the predictions has IoU NaN and is
      left out of mIoU. A class with no ground-truth pixel has Acc NaN (recall is undefined) and
      is left out of mAcc, as in mmsegmentation; torchmetrics instead reports 0 for such classes,
      and counts a 0 Acc for a class that is predicted but absent from the ground truth.
    """

    def __init__(self, num_classes: int, ignore_index: int = 255, class_names: list[str] | None = None):
        super().__init__()
        if num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        if class_names is not None and len(class_names) != num_classes:
            raise ValueError(f"{len(class_names)} class_names for num_classes={num_classes}")
        self.num_classes = num_classes
        self.ignore_index = ignore_index
        self.names_given = class_names is not None
        self.class_names = [str(name) for name in class_names] if class_names else [str(c) for c in range(num_classes)]
        # confusion[t, p]: pixels of ground-truth class t predicted as class p.
        self.add_state("confusion", torch.zeros(num_classes, num_classes, dtype=torch.int64))

    def use_dataset(self, dataset, path: str, dataset_path: str) -> None:
        names = getattr(dataset, "class_names", None)
        if names is None:
            return
        names = [str(name) for name in names]
        if len(names) != self.num_classes:
            raise ConfigError(f"{path}.num_classes: {self.num_classes}, but {dataset_path} has {len(names)} "
                              f"classes ({', '.join(names)})")
        if self.names_given and names != self.class_names:
            raise ConfigError(f"{path}.class_names: [{', '.join(self.class_names)}] differ from {dataset_path}'s "
                              f"classes [{', '.join(names)}]; leave them out to use the dataset's")
        self.class_names = names

    def update(self, outputs: dict[str, Any]) -> None:
        pred, target = outputs["pred"], outputs["target"]
        if pred.shape != target.shape:
            raise ValueError(f"pred {tuple(pred.shape)} and target {tuple(target.shape)} differ in shape")
        self.to(target.device)
        valid = target != self.ignore_index
        cells = target[valid] * self.num_classes + pred[valid]
        counts = torch.bincount(cells, minlength=self.num_classes**2)
        if counts.numel() > self.num_classes**2:  # bincount grew its output for an out-of-range id
            raise ValueError(
                f"a target label (other than ignore_index={self.ignore_index}) or a prediction "
                f"is >= num_classes={self.num_classes}"
            )
        self.confusion += counts.view(self.num_classes, self.num_classes)

    def result_names(self) -> list[str]:
        return ["mIoU", "mAcc", "aAcc", *(f"IoU.{n}" for n in self.class_names), *(f"Acc.{n}" for n in self.class_names)]

    def compute(self) -> dict[str, float]:
        confusion = self.confusion.double()
        true_positive = confusion.diagonal()
        in_target = confusion.sum(dim=1)
        in_pred = confusion.sum(dim=0)
        nan = torch.tensor(float("nan"), dtype=confusion.dtype, device=confusion.device)
        union = in_target + in_pred - true_positive
        iou = torch.where(union > 0, true_positive / union, nan)
        acc = torch.where(in_target > 0, true_positive / in_target, nan)
        summary = torch.stack([iou.nanmean(), acc.nanmean(), true_positive.sum() / confusion.sum()])
        mean_iou, mean_acc, overall_acc = summary.tolist()
        values = {"mIoU": mean_iou, "mAcc": mean_acc, "aAcc": overall_acc}
        values.update({f"IoU.{name}": v for name, v in zip(self.class_names, iou.tolist())})
        values.update({f"Acc.{name}": v for name, v in zip(self.class_names, acc.tolist())})
        return values

    def images(self) -> dict[str, torch.Tensor]:
        """The confusion matrix, each ground-truth row normalised to 1 (row t, column p: the share
        of class t's pixels predicted as p), as a heatmap: a perfect model is a bright diagonal."""
        confusion = self.confusion.double()
        rows = confusion / confusion.sum(dim=1, keepdim=True).clamp(min=1)
        return {"confusion_matrix": heatmap(rows.float())}
