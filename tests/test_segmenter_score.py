"""SegmenterScore and Diversity (framework/metrics/segmenter_score.py, diversity.py): a segmentation
run scores generated images; the numbers against a confusion matrix computed here by hand."""

from __future__ import annotations

import importlib.util
import json
import shutil

import numpy as np
import pytest
import torch
import yaml
from test_kid import _fidelity_weights

from framework.checkpoint.files import save_checkpoint
from framework.config import load_config, to_plain
from framework.config.metric_direction import metric_direction
from framework.data import SyntheticTextures
from framework.errors import CheckpointError, ConfigError
from framework.metrics import Diversity, SegmenterScore
from framework.metrics.segmenter_score import RESULT_NAMES
from framework.registry import METRICS, TASKS
from support import REPO, run_forked_ranks, train_run

TEXTURES = REPO / "configs" / "segmentation" / "unet_textures.yaml"
TINY = ["device=cpu", "task.model.base_channels=4", "task.model.depth=2", "data.train.dataset.size=32",
        "data.train.dataset.num_samples=16", "data.train.batch_size=4", "data.train.num_workers=0",
        "data.val.dataset.size=32", "data.val.dataset.num_samples=8", "data.val.batch_size=8",
        "data.val.num_workers=0", "train.max_iters=30", "train.val_interval=30", "train.ckpt_interval=30",
        "train.log_interval=10"]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A segmenter trained by tools/train.py on SyntheticTextures for a few iterations."""
    folder = tmp_path_factory.mktemp("segmenter")
    run = train_run(folder / "run", TEXTURES, *TINY)
    config = folder / "config.yaml"  # the run's resolved config, as a user would point at it
    shutil.copy(run / "config.yaml", config)
    return config, run / "checkpoints" / "iter_30.pth"


def _outputs(seed: int, count: int = 4) -> dict:
    dataset = SyntheticTextures(num_samples=count, size=32, seed=seed)
    real = torch.stack([dataset[i]["image"] for i in range(count)]).float() / 255
    labels = torch.stack([dataset[i]["mask"] for i in range(count)])
    labels[:, :2, :2] = 255  # some ignored pixels
    fake = (real + 0.3 * torch.rand(real.shape, generator=torch.Generator().manual_seed(seed))).clamp(0, 1)
    return {"fake": fake, "real": real, "labels": labels}


def _confusion(pred: torch.Tensor, labels: torch.Tensor, classes: int) -> np.ndarray:
    matrix = np.zeros((classes, classes), dtype=np.int64)
    for p, t in zip(pred.flatten().tolist(), labels.flatten().tolist()):
        if t != 255:
            matrix[t, p] += 1
    return matrix


def _miou_and_accuracy(matrix: np.ndarray) -> tuple[float, float]:
    ious = []
    for c in range(len(matrix)):
        union = matrix[c].sum() + matrix[:, c].sum() - matrix[c, c]
        if union:
            ious.append(matrix[c, c] / union)
    return float(np.mean(ious)), float(np.trace(matrix) / matrix.sum())


def test_scores_match_a_hand_computed_confusion_matrix(trained_run, framework_log):
    config, checkpoint = trained_run
    metric = METRICS.build({"type": "SegmenterScore", "config": str(config), "checkpoint": str(checkpoint),
                            "num_classes": 7})
    batches = [_outputs(seed) for seed in (1, 2)]
    for batch in batches:
        metric.update(batch)
    assert sum("SegmenterScore:" in r.message for r in framework_log.records) == 1  # the protocol, once

    # The same segmenter, rebuilt here as SegmentationTask builds it, predicts by hand.
    task = TASKS.build(to_plain(load_config(config))["task"])
    task.load_state_dict(torch.load(checkpoint, weights_only=True)["task"])
    task.eval()
    with torch.no_grad():
        def predict(images):
            return task.model(task.normalize(images * 255)).argmax(dim=1)

        fake_matrix = sum(_confusion(predict(b["fake"]), b["labels"], 7) for b in batches)
        real_matrix = sum(_confusion(predict(b["real"]), b["labels"], 7) for b in batches)
    values = metric.compute()
    fake_miou, fake_accuracy = _miou_and_accuracy(fake_matrix)
    real_miou, real_accuracy = _miou_and_accuracy(real_matrix)
    assert values == pytest.approx({"mIoU_fake": fake_miou, "aAcc_fake": fake_accuracy, "mIoU_real": real_miou,
                                    "aAcc_real": real_accuracy, "mIoU_ratio": fake_miou / real_miou})
    assert fake_accuracy != real_accuracy  # the two sets are scored apart
    assert sorted(values) == sorted(metric.result_names())
    metric.reset()
    metric.update(batches[0])
    assert metric.compute()["mIoU_fake"] == pytest.approx(_miou_and_accuracy(
        _confusion(predict(batches[0]["fake"]), batches[0]["labels"], 7))[0])


def test_labels_of_another_size_are_resized_nearest_to_the_images(trained_run):
    config, checkpoint = trained_run
    batch = _outputs(3)
    big = dict(batch, labels=batch["labels"].repeat_interleave(2, 1).repeat_interleave(2, 2))  # 64x64
    same, resized = (SegmenterScore(str(config), str(checkpoint), 7) for _ in range(2))
    same.update(batch)
    resized.update(big)
    assert resized.compute() == pytest.approx(same.compute(), nan_ok=True)


def test_a_binary_model_predicts_logit_above_zero(tmp_path):
    plain = to_plain(load_config(TEXTURES, ["task.num_classes=2", "task.class_names=null", "task.model.num_classes=1",
                                            "task.model.base_channels=4", "task.model.depth=1"]))
    config = tmp_path / "binary.yaml"
    config.write_text(yaml.safe_dump(plain))
    torch.manual_seed(0)
    task = TASKS.build(plain["task"])
    checkpoint = tmp_path / "binary.pth"
    save_checkpoint({"meta": {}, "task": task.state_dict(), "optim": {}, "rng": {}}, checkpoint)
    metric = SegmenterScore(str(config), str(checkpoint), num_classes=2)
    images = torch.rand(2, 3, 16, 16)
    labels = torch.randint(0, 2, (2, 16, 16))
    metric.update({"fake": images, "real": images, "labels": labels})
    task.eval()
    with torch.no_grad():
        pred = (task.model(task.normalize(images * 255))[:, 0] > 0).long()
    miou, accuracy = _miou_and_accuracy(_confusion(pred, labels, 2))
    values = metric.compute()
    assert values["mIoU_fake"] == pytest.approx(miou) and values["aAcc_fake"] == pytest.approx(accuracy)
    assert values["mIoU_ratio"] == pytest.approx(1.0)


def test_bad_segmenters_are_one_line_errors(trained_run, tmp_path):
    config, checkpoint = trained_run
    node = {"type": "SegmenterScore", "config": str(config), "checkpoint": str(checkpoint), "num_classes": 7}
    with pytest.raises(ConfigError, match=r"^metrics\[0\] \(SegmenterScore\): config: segmenter config file not found: "):
        METRICS.build({**node, "config": str(tmp_path / "nope.yaml")}, path="metrics[0]")
    with pytest.raises(ConfigError, match="checkpoint: segmenter checkpoint file not found: .*missing.pth"):
        METRICS.build({**node, "checkpoint": str(tmp_path / "missing.pth")}, path="metrics[0]")
    with pytest.raises(ConfigError, match=r"the segmenter of .* has 7 classes, the synthesis 8"):
        METRICS.build({**node, "num_classes": 8}, path="metrics[0]")
    gan_config = REPO / "projects" / "dcgan" / "configs"
    gan = next(gan_config.glob("*.yaml"))
    with pytest.raises(ConfigError, match=r"is not a segmentation run \(task.type 'GANTask'"):
        METRICS.build({**node, "config": str(gan)}, path="metrics[0]")
    not_a_checkpoint = tmp_path / "empty.pth"
    torch.save({"task": {"loss.weight": torch.ones(1)}}, not_a_checkpoint)
    with pytest.raises(CheckpointError, match="holds no model.\\* weights"):
        METRICS.build({**node, "checkpoint": str(not_a_checkpoint)}, path="metrics[0]")
    other_model = tmp_path / "other.pth"
    torch.save({"task": {"model.head.weight": torch.ones(1)}}, other_model)
    with pytest.raises(CheckpointError, match="does not fit the model of"):
        METRICS.build({**node, "checkpoint": str(other_model)}, path="metrics[0]")
    metric = METRICS.build(node)
    with pytest.raises(ValueError, match="needs labels in the task's evaluation outputs"):
        metric.update({"fake": torch.rand(1, 3, 8, 8), "real": torch.rand(1, 3, 8, 8)})


def test_diversity_is_the_mean_absolute_difference_on_the_unit_scale():
    metric = Diversity()
    a = torch.tensor([[[[0.0, 1.0], [0.5, 0.25]]]]).expand(1, 3, 2, 2)
    b = torch.tensor([[[[1.0, 1.0], [0.0, 0.25]]]]).expand(1, 3, 2, 2)
    metric.update({"fake": a, "fake_alt": b})
    assert metric.compute() == {"Diversity": pytest.approx(1.5 / 4)}
    metric.update({"fake": a, "fake_alt": a})  # a second batch of identical draws halves it
    assert metric.compute()["Diversity"] == pytest.approx(1.5 / 8)
    metric.reset()
    eight_bit = torch.full((1, 3, 2, 2), 51 / 255)
    metric.update({"fake": eight_bit, "fake_alt": torch.zeros(1, 3, 2, 2)})
    assert metric.compute()["Diversity"] == pytest.approx(0.2)  # 51 levels / 255
    with pytest.raises(ValueError, match="'fake' and 'fake_alt'"):
        metric.update({"fake": a})


def test_synthesis_metrics_under_ddp_equal_one_process_over_every_image(trained_run, tmp_path):
    """Two gloo ranks with 3 and 2 label maps: SegmenterScore sums its confusion matrices,
    Diversity its sums, KID gathers its features; every rank reports what one process computes
    over all five."""
    config, checkpoint = trained_run
    _, kid_weights = _fidelity_weights(tmp_path)
    script = REPO / "tests" / "scripts" / "synthesis_metrics_ddp.py"
    result = run_forked_ranks(2, str(script), tmp_path, config, checkpoint, kid_weights, folder=tmp_path / "out",
                              timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0] == ranks[1]

    spec = importlib.util.spec_from_file_location("synthesis_metrics_ddp", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    expected = {}
    for node in module.metric_nodes(str(config), str(checkpoint), str(kid_weights)):
        metric = METRICS.build(node)
        metric.update(module.outputs())
        expected.update(metric.compute())
    assert set(ranks[0]) == set(expected) >= {"mIoU_fake", "Diversity", "KID"}
    assert ranks[0] == pytest.approx(expected, rel=1e-5, nan_ok=True)


def test_every_synthesis_score_can_pick_best_pth_with_best_mode_auto():
    """The result names carry their direction as the other metrics' do (metric_direction.py reads
    `mIoU_fake` as an mIoU), so `train.best_mode: auto` needs no help; KID is a distance."""
    assert {name: metric_direction(name) for name in RESULT_NAMES} == dict.fromkeys(RESULT_NAMES, "greater")
    assert metric_direction("KID") == metric_direction("KID_std") == "less"
