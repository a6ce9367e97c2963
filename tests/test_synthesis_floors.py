"""benchmarks/quality/synthesis_floors.py at a tiny size: the class-mean painting against class means
computed here by hand, the floors' numbers against SegmenterScore run directly on the same
images, and L1 training that lowers the L1 loss."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml

import projects.pix2pix  # noqa: F401  (registers UNetGenerator)
from benchmarks.quality import synthesis_floors as floors
from framework.checkpoint.files import save_checkpoint
from framework.config import load_config, to_plain
from framework.data import SyntheticTextures
from framework.engine.random_state import seed_everything
from framework.inference.generator import to_signed, to_unit
from framework.metrics import SWD, SegmenterScore
from framework.registry import MODELS, TASKS
from framework.runtime.cli import run
from support import REPO

SEGMENTER = REPO / "configs" / "segmentation" / "unet_textures.yaml"
SIZE, TRAIN, VAL, VAL_BATCH = 32, 8, 6, 4  # two val batches, the second partial
GENERATOR = {"type": "UNetGenerator", "base_channels": 4, "num_downs": 5, "norm": "in"}  # 32 = 2**5


def _dump(plain: dict, path) -> str:
    path.write_text(yaml.safe_dump(plain))
    return str(path)


@pytest.fixture(scope="module")
def run_files(tmp_path_factory):
    """A tiny segmenter saved as tools/train.py saves one, and tiny synthesis and pix2pix configs."""
    folder = tmp_path_factory.mktemp("floors")
    segmenter = to_plain(load_config(SEGMENTER, ["task.model.base_channels=4", "task.model.depth=2"]))
    torch.manual_seed(0)
    task = TASKS.build(segmenter["task"])
    # 40 steps: untrained, it calls every pixel of these images one class, real or painted alike
    images, labels = _split({"type": "SyntheticTextures", "num_samples": 16, "size": SIZE, "seed": 7})
    optimizer = torch.optim.Adam(task.parameters(), 1e-2)
    for step in range(40):
        chosen = torch.arange(step * 8, step * 8 + 8) % 16
        loss = F.cross_entropy(task.model(task.normalize(images[chosen].float())), labels[chosen])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    checkpoint = folder / "segmenter.pth"
    save_checkpoint({"meta": {}, "task": task.state_dict(), "optim": {}, "rng": {}}, checkpoint)
    synthesis = to_plain(load_config(floors.SYNTHESIS_CONFIG, [
        f"data.train.dataset.size={SIZE}", f"data.train.dataset.num_samples={TRAIN}", "data.train.batch_size=4",
        f"data.val.dataset.size={SIZE}", f"data.val.dataset.num_samples={VAL}", f"data.val.batch_size={VAL_BATCH}"]))
    pix2pix = to_plain(load_config(floors.PIX2PIX_CONFIG))
    pix2pix["task"]["generator"] = dict(GENERATOR)
    return {"segmenter_config": _dump(segmenter, folder / "segmenter.yaml"), "segmenter_checkpoint": str(checkpoint),
            "synthesis_config": _dump(synthesis, folder / "synthesis.yaml"), "synthesis": synthesis,
            "pix2pix_config": _dump(pix2pix, folder / "pix2pix.yaml"), "pix2pix": pix2pix, "folder": folder}


def _split(node: dict) -> tuple[torch.Tensor, torch.Tensor]:
    dataset = SyntheticTextures(**{k: v for k, v in node.items() if k != "type"})
    return (torch.stack([dataset[i]["image"] for i in range(len(dataset))]),
            torch.stack([dataset[i]["mask"] for i in range(len(dataset))]))


def _run_script(files: dict, *extra: str, capsys) -> tuple[int, str, str]:
    argv = ["--segmenter-config", files["segmenter_config"], "--segmenter-checkpoint", files["segmenter_checkpoint"],
            "--synthesis-config", files["synthesis_config"], "--pix2pix-config", files["pix2pix_config"], *extra]
    code = run(floors.main, floors.parse_args(), argv)
    out, err = capsys.readouterr()
    return code, out, err


def _direct_scores(files: dict, fakes: torch.Tensor, images: torch.Tensor, labels: torch.Tensor) -> dict:
    """SegmenterScore, and SWD (it reads the pixels themselves), in the val batches."""
    values = {}
    for metric in (SegmenterScore(files["segmenter_config"], files["segmenter_checkpoint"], num_classes=7), SWD()):
        for start in range(0, len(fakes), VAL_BATCH):
            part = slice(start, start + VAL_BATCH)
            metric.update({"fake": fakes[part], "real": images[part].float() / 255, "labels": labels[part]})
        values.update(metric.compute())
    return values


def test_the_class_mean_painting_is_one_flat_train_class_mean_per_region():
    images, labels = _split({"type": "SyntheticTextures", "num_samples": TRAIN, "size": SIZE, "seed": 0})
    labels[0, :3, :3] = 255  # ignored pixels count in no class
    pixels, flat = images.permute(0, 2, 3, 1).reshape(-1, 3).numpy().astype(np.float64), labels.reshape(-1).numpy()
    by_hand = np.stack([pixels[flat == c].mean(axis=0) for c in range(7)])
    colours = floors.class_mean_colours(images, labels, 7, 255)
    np.testing.assert_allclose(colours[:7].numpy(), by_hand, rtol=1e-6)
    np.testing.assert_allclose(colours[7].numpy(), pixels[flat != 255].mean(axis=0), rtol=1e-6)

    _, val_labels = _split({"type": "SyntheticTextures", "num_samples": VAL, "size": SIZE, "seed": 12345})
    val_labels[1, -2:, -2:] = 255
    painting = floors.paint_class_means(val_labels, colours, 255)
    assert painting.shape == (VAL, 3, SIZE, SIZE)
    ignored = painting[1, :, -2:, -2:].reshape(3, -1)  # the overall train mean: no class's colour
    np.testing.assert_allclose(ignored.numpy(), np.repeat(colours[7].numpy()[:, None] / 255, 4, 1), rtol=1e-6)
    for image, label in zip(painting, val_labels):
        for c in set(label.unique().tolist()) - {255}:
            region = image[:, label == c]  # 3 x pixels of class c
            np.testing.assert_allclose(region.numpy(), np.repeat(by_hand[c][:, None] / 255, region.shape[1], 1),
                                       rtol=1e-6)


def test_l1_training_lowers_the_l1_loss_and_repeats_with_its_seed(run_files):
    images, labels = _split(run_files["synthesis"]["data"]["train"]["dataset"])
    inputs, targets = floors.label_images(labels, 7, 255), to_signed(images)
    # pix2pix's Adam at its full rate: the config's 50 warm-up iterations would outlast this run
    optimizer = {**run_files["pix2pix"]["optimizers"]["generator"], "scheduler": None}
    trained = []
    for _ in range(2):
        seed_everything(3, deterministic=True)
        generator = MODELS.build(dict(GENERATOR))
        before = floors.mean_l1(generator, inputs, targets, VAL_BATCH)
        losses = floors.train_l1(generator, optimizer, inputs, targets, 40, 4, seed=3)
        trained.append((before, losses, floors.mean_l1(generator, inputs, targets, VAL_BATCH)))
    (before, losses, after), again = trained
    assert after < 0.92 * before, (before, after)  # most of it is texture phase, which L1 cannot learn
    assert np.mean(losses[-5:]) < np.mean(losses[:5])
    assert again == (before, losses, after)  # seeded: the same losses to the bit


def test_the_floors_are_segmenter_score_on_the_painted_and_generated_images(run_files, capsys):
    out_file = run_files["folder"] / "floors.json"
    code, out, err = _run_script(run_files, "--iters", "30", "--seed", "1", "--out", str(out_file), capsys=capsys)
    assert code == 0, err
    report = json.loads(out_file.read_text())["floors"]
    data = run_files["synthesis"]["data"]
    train_images, train_labels = _split(data["train"]["dataset"])
    val_images, val_labels = _split(data["val"]["dataset"])

    colours = floors.class_mean_colours(train_images, train_labels, 7, 255)
    painted = _direct_scores(run_files, floors.paint_class_means(val_labels, colours, 255), val_images, val_labels)
    assert {k: report["class_mean_painting"][k] for k in painted} == pytest.approx(painted)
    assert painted["mIoU_fake"] != painted["mIoU_real"]  # the segmenter tells painted from real images

    seed_everything(1, deterministic=True)  # the script's generator again: same seed, same 30 steps
    generator = MODELS.build(dict(GENERATOR))
    floors.train_l1(generator, run_files["pix2pix"]["optimizers"]["generator"], floors.label_images(train_labels, 7, 255),
                    to_signed(train_images), 30, data["train"]["batch_size"], 1)
    with torch.no_grad():
        fakes = to_unit(generator.eval()(floors.label_images(val_labels, 7, 255)))
    generated = _direct_scores(run_files, fakes, val_images, val_labels)
    assert {k: report["pix2pix_l1"][k] for k in generated} == pytest.approx(generated)
    assert report["pix2pix_l1"]["Diversity"] == 0.0  # no noise: both draws are one image

    rows = [line for line in out.splitlines() if line.startswith("| floor:")]
    assert len(rows) == 2
    assert f"| {painted['mIoU_fake']:.3f} | {painted['mIoU_ratio']:.3f} | {painted['aAcc_fake']:.3f} |" in rows[0]
    assert f"| {generated['mIoU_fake']:.3f} | {generated['mIoU_ratio']:.3f} | {generated['aAcc_fake']:.3f} |" in rows[1]


def test_a_missing_checkpoint_is_refused_in_one_line_before_any_work(run_files, capsys):
    files = {**run_files, "segmenter_checkpoint": str(run_files["folder"] / "missing.pth")}
    out_file = run_files["folder"] / "never.json"
    code, out, err = _run_script(files, "--out", str(out_file), capsys=capsys)
    assert code == 2 and out == ""
    assert err == f"error: --segmenter-checkpoint: file not found: {files['segmenter_checkpoint']}\n"
    assert not out_file.exists()
