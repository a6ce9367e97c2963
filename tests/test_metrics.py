import math

import pytest
import torch
from torchmetrics.classification import MulticlassAccuracy, MulticlassJaccardIndex

from framework.metrics import Metric, SegmentationMetrics
from framework.registry import METRICS

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
