import math
from types import SimpleNamespace

import pytest
import torch
from torchmetrics.classification import MulticlassAccuracy, MulticlassJaccardIndex

from framework.errors import ConfigError
from framework.metrics import Metric, SegmentationMetrics, json_safe, summary_values
from framework.metrics.base import fit_metrics_to_dataset, known_result_names
from framework.registry import METRICS
from framework.visualization.heatmap import heatmap

NUM_CLASSES = 5
IGNORE = 255


def random_batches(count=4, seed=0):
    """(pred, target) batches where every class appears in both, with some ignored pixels."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(count):
        target = torch.randint(0, NUM_CLASSES, (2, 16, 16), generator=generator)
        # Right 60% of the time, so the scores are far from both 0 and chance.
        guess = torch.randint(0, NUM_CLASSES, target.shape, generator=generator)
        pred = torch.where(torch.rand(target.shape, generator=generator) < 0.6, target, guess)
        target[torch.rand(target.shape, generator=generator) < 0.1] = IGNORE
        batches.append((pred, target))
    return batches


def accumulate(metric, batches):
    for pred, target in batches:
        metric.update({"pred": pred, "target": target, "loss": torch.tensor(0.3)})
    return metric


def torchmetrics_values(batches):
    references = {
        "mIoU": MulticlassJaccardIndex(NUM_CLASSES, ignore_index=IGNORE, average="macro"),
        "IoU": MulticlassJaccardIndex(NUM_CLASSES, ignore_index=IGNORE, average="none"),
        "aAcc": MulticlassAccuracy(NUM_CLASSES, ignore_index=IGNORE, average="micro"),
        "mAcc": MulticlassAccuracy(NUM_CLASSES, ignore_index=IGNORE, average="macro"),
        "Acc": MulticlassAccuracy(NUM_CLASSES, ignore_index=IGNORE, average="none"),
    }
    for pred, target in batches:
        for reference in references.values():
            reference.update(pred, target)
    return {key: reference.compute() for key, reference in references.items()}


def test_matches_torchmetrics_over_several_batches():
    batches = random_batches()
    values = accumulate(SegmentationMetrics(NUM_CLASSES, ignore_index=IGNORE), batches).compute()
    expected = torchmetrics_values(batches)
    for key in ("mIoU", "aAcc", "mAcc"):
        assert values[key] == pytest.approx(expected[key].item(), abs=1e-6), key
    for c in range(NUM_CLASSES):
        assert values[f"IoU.{c}"] == pytest.approx(expected["IoU"][c].item(), abs=1e-6)
        assert values[f"Acc.{c}"] == pytest.approx(expected["Acc"][c].item(), abs=1e-6)
    assert 0.3 < values["mIoU"] < 0.9


def test_values_are_python_floats_with_named_classes():
    names = ["sky", "road", "car", "tree", "person"]
    values = accumulate(SegmentationMetrics(NUM_CLASSES, class_names=names), random_batches(1)).compute()
    assert set(values) == {"mIoU", "mAcc", "aAcc"} | {f"{kind}.{n}" for kind in ("IoU", "Acc") for n in names}
    assert all(type(v) is float and 0.0 <= v <= 1.0 for v in values.values())


def test_hand_computed_example():
    target = torch.tensor([[[0, 0, 1, 1], [2, 2, IGNORE, IGNORE]]])
    pred = torch.tensor([[[0, 1, 1, 1], [2, 0, 2, 0]]])
    values = accumulate(SegmentationMetrics(3), [(pred, target)]).compute()
    # class 0: tp 1, fn 1, fp 1; class 1: tp 2, fp 1; class 2: tp 1, fn 1 (ignored pixels not counted)
    assert values["IoU.0"] == pytest.approx(1 / 3)
    assert values["IoU.1"] == pytest.approx(2 / 3)
    assert values["IoU.2"] == pytest.approx(1 / 2)
    assert values["Acc.0"] == pytest.approx(1 / 2)
    assert values["Acc.1"] == pytest.approx(1.0)
    assert values["aAcc"] == pytest.approx(4 / 6)
    assert values["mIoU"] == pytest.approx((1 / 3 + 2 / 3 + 1 / 2) / 3)


def test_class_absent_from_prediction_and_target_is_nan_and_left_out_of_means():
    target = torch.tensor([[[0, 0, 1, 1]]])
    pred = torch.tensor([[[0, 1, 1, 1]]])
    values = accumulate(SegmentationMetrics(3), [(pred, target)]).compute()
    assert math.isnan(values["IoU.2"]) and math.isnan(values["Acc.2"])
    assert values["mIoU"] == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert values["mAcc"] == pytest.approx((1 / 2 + 1) / 2)


def test_class_predicted_but_absent_from_target_counts_zero_iou_and_nan_acc():
    target = torch.tensor([[[0, 0, 1, 1]]])
    pred = torch.tensor([[[0, 2, 1, 1]]])
    values = accumulate(SegmentationMetrics(3), [(pred, target)]).compute()
    assert values["IoU.2"] == 0.0 and math.isnan(values["Acc.2"])
    assert values["mIoU"] == pytest.approx((1 / 2 + 1 + 0) / 3)


def test_sync_sums_states_so_ratios_are_unchanged():
    metric = accumulate(SegmentationMetrics(NUM_CLASSES), random_batches())
    before = metric.compute()
    confusion = metric.confusion.clone()
    metric.sync(lambda tensor: tensor.mul_(2))  # as if a second rank had seen the same pixels
    assert torch.equal(metric.confusion, 2 * confusion)
    assert metric.compute() == pytest.approx(before)


def test_reset_clears_the_confusion_matrix():
    metric = accumulate(SegmentationMetrics(NUM_CLASSES), random_batches(1))
    metric.reset()
    assert metric.confusion.sum() == 0
    fresh = accumulate(SegmentationMetrics(NUM_CLASSES), random_batches(2, seed=1)).compute()
    assert accumulate(metric, random_batches(2, seed=1)).compute() == pytest.approx(fresh)


def test_reset_keeps_states_on_their_device():
    metric = SegmentationMetrics(NUM_CLASSES).to("meta")
    metric.reset()
    assert metric.confusion.device.type == "meta"


def test_label_out_of_range_is_reported():
    metric = SegmentationMetrics(3)
    with pytest.raises(ValueError, match=r"num_classes=3"):
        metric.update({"pred": torch.zeros(1, 2, 2, dtype=torch.int64), "target": torch.full((1, 2, 2), 7)})


def test_registry_builds_segmentation_metrics():
    metric = METRICS.build({"type": "SegmentationMetrics", "num_classes": 2, "class_names": ["bg", "fg"]})
    assert isinstance(metric, Metric) and metric.class_names == ["bg", "fg"]


def test_class_names_length_must_match():
    with pytest.raises(ValueError, match=r"1 class_names for num_classes=2"):
        SegmentationMetrics(2, class_names=["bg"])


def test_fewer_than_one_class_is_refused_and_one_class_is_a_metric():
    with pytest.raises(ValueError, match=r"^num_classes must be >= 1, got 0$"):
        SegmentationMetrics(0)
    values = accumulate(SegmentationMetrics(1), [(torch.zeros(1, 2, 2, dtype=torch.int64),) * 2]).compute()
    assert values == {"mIoU": 1.0, "mAcc": 1.0, "aAcc": 1.0, "IoU.0": 1.0, "Acc.0": 1.0}


def test_a_class_with_one_ground_truth_pixel_has_its_recall():
    # Class 1 has exactly one target pixel (found), class 2 one (missed): Acc 1 and 0, not NaN.
    target = torch.tensor([[[0, 0, 1, 2]]])
    pred = torch.tensor([[[0, 0, 1, 0]]])
    values = accumulate(SegmentationMetrics(3), [(pred, target)]).compute()
    assert (values["Acc.0"], values["Acc.1"], values["Acc.2"]) == (1.0, 1.0, 0.0)
    assert values["mAcc"] == pytest.approx(2 / 3)
    assert (values["IoU.0"], values["IoU.1"], values["IoU.2"]) == (pytest.approx(2 / 3), 1.0, 0.0)


def test_counts_stay_exact_past_float32_precision():
    # Pixel counts are int64: in float32, 2**24 + 1 rounds to 2**24 (one 1024 x 2048 image
    # has 2**21 pixels, so a validation set reaches this).
    metric = accumulate(SegmentationMetrics(2), [(torch.zeros(1, 1, 1, dtype=torch.int64),) * 2])
    metric.sync(lambda tensor: tensor.add_(2**24))  # as if other ranks had counted 2**24 more in each cell
    assert metric.confusion.dtype == torch.int64
    assert metric.confusion.tolist() == [[2**24 + 1, 2**24], [2**24, 2**24]]


def test_pred_and_target_of_other_shapes_are_named():
    with pytest.raises(ValueError, match=r"^pred \(1, 2, 2\) and target \(1, 2, 3\) differ in shape$"):
        SegmentationMetrics(3).update({"pred": torch.zeros(1, 2, 2, dtype=torch.int64),
                                       "target": torch.zeros(1, 2, 3, dtype=torch.int64)})


def test_result_names_are_the_keys_compute_returns_in_order():
    metric = accumulate(SegmentationMetrics(NUM_CLASSES, class_names=list("abcde")), random_batches(1))
    assert metric.result_names() == list(metric.compute()) == [
        "mIoU", "mAcc", "aAcc", "IoU.a", "IoU.b", "IoU.c", "IoU.d", "IoU.e", "Acc.a", "Acc.b", "Acc.c", "Acc.d", "Acc.e"]


def test_confusion_image_is_each_ground_truth_row_normalised():
    # class 0: 3 pixels, 2 right, 1 as class 1; class 1: 1 pixel, right; class 2: no pixel (row of zeros).
    target = torch.tensor([[[0, 0, 0, 1]]])
    pred = torch.tensor([[[0, 1, 0, 1]]])
    images = accumulate(SegmentationMetrics(3), [(pred, target)]).images()
    rows = torch.tensor([[2 / 3, 1 / 3, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    assert list(images) == ["confusion_matrix"]
    assert torch.allclose(images["confusion_matrix"], heatmap(rows), atol=1e-6)


class Named:
    def __init__(self, *names):
        self.class_names = names


def test_dataset_class_names_are_adopted_when_none_were_given():
    metric = SegmentationMetrics(2)
    metric.use_dataset(Named("bg", 1), "metrics[0]", "data.val.dataset")
    assert metric.class_names == ["bg", "1"]
    metric.use_dataset(SimpleNamespace(), "metrics[0]", "data.val.dataset")  # a dataset without names: kept
    assert metric.class_names == ["bg", "1"]
    same = SegmentationMetrics(2, class_names=["bg", "fg"])
    same.use_dataset(Named("bg", "fg"), "metrics[0]", "data.val.dataset")
    assert same.class_names == ["bg", "fg"]


def test_dataset_of_another_number_of_classes_or_other_names_is_one_clear_error():
    with pytest.raises(ConfigError, match=r"^metrics\[0\]\.num_classes: 2, but data\.val\.dataset has 3 classes \(a, b, c\)$"):
        SegmentationMetrics(2).use_dataset(Named("a", "b", "c"), "metrics[0]", "data.val.dataset")
    with pytest.raises(ConfigError, match=r"^metrics\[1\]\.class_names: \[bg, fg\] differ from data\.val\.dataset's "
                                          r"classes \[bg, cat\]; leave them out to use the dataset's$"):
        SegmentationMetrics(2, class_names=["bg", "fg"]).use_dataset(Named("bg", "cat"), "metrics[1]", "data.val.dataset")


def test_every_reset_starts_from_zero():
    # The default is copied on reset: states are updated in place, so sharing it would carry
    # the first evaluation's counts into the third.
    metric = SegmentationMetrics(NUM_CLASSES)
    for _ in range(3):
        metric.reset()
        assert metric.confusion.sum() == 0
        accumulate(metric, random_batches(1))


def test_summary_values_leave_out_per_class_ones_and_json_safe_turns_nan_into_none():
    values = {"mIoU": 0.5, "aAcc": 0.75, "IoU.cat": float("nan"), "Acc.cat": 1.0, "count": 3}
    assert summary_values(values) == {"mIoU": 0.5, "aAcc": 0.75, "count": 3}
    assert json_safe(values) == {"mIoU": 0.5, "aAcc": 0.75, "IoU.cat": None, "Acc.cat": 1.0, "count": 3}


class Unnamed(Metric):
    """A metric that cannot say its keys before an evaluation."""

    def update(self, outputs):
        pass

    def compute(self):
        return {}


def test_known_result_names_are_every_metrics_names_in_order_or_none():
    first, second = SegmentationMetrics(1, class_names=["a"]), SegmentationMetrics(1, class_names=["b"])
    assert known_result_names([first, second]) == ["mIoU", "mAcc", "aAcc", "IoU.a", "Acc.a",
                                                   "mIoU", "mAcc", "aAcc", "IoU.b", "Acc.b"]
    assert known_result_names([first, Unnamed(), second]) is None
    assert known_result_names([]) == []


def test_every_metric_is_fitted_to_the_dataset_with_its_own_path():
    seen = []

    class Recording(Unnamed):
        def use_dataset(self, dataset, path, dataset_path):
            seen.append((dataset, path, dataset_path))

    dataset = Named("bg", "fg")
    segmentation = SegmentationMetrics(2)
    fit_metrics_to_dataset([Recording(), segmentation, object(), Recording()], dataset, "data.val.dataset")
    assert seen == [(dataset, "metrics[0]", "data.val.dataset"), (dataset, "metrics[3]", "data.val.dataset")]
    assert segmentation.class_names == ["bg", "fg"]
