"""pix2pix end to end through the command-line tools at a tiny size, its networks and datasets."""

import json

import cv2
import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import framework  # noqa: F401
import projects.pix2pix  # noqa: F401  (registers the networks and datasets)
from framework.checkpoint.files import load_checkpoint
from framework.errors import ConfigError, DataError
from framework.registry import DATASETS, MODELS
from support import REPO, call_tool, named, run_forked_tool, train_run

CONFIG = REPO / "projects/pix2pix/configs/pix2pix_shapes.yaml"
TINY = [
    "train.max_iters=4", "train.val_interval=2", "train.ckpt_interval=2", "train.log_interval=2",
    "data.train.dataset.num_samples=16", "data.train.dataset.size=32", "data.train.num_workers=0",
    "data.train.batch_size=4", "data.val.dataset.num_samples=8", "data.val.dataset.size=32",
    "data.val.batch_size=8", "task.generator.num_downs=5", "task.generator.base_channels=8",
    "task.discriminator.base_channels=8", "+task.ema_decay=0.9", "+task.generator.dropout=0.5", "device=cpu",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_run(tmp_path_factory.mktemp("pix2pix"), CONFIG, *TINY, runner=run_forked_tool)


def read_metrics(work_dir):
    return [json.loads(line) for line in (work_dir / "metrics.jsonl").read_text().splitlines()]


def test_evaluates_at_start_and_logs_every_loss_term(trained):
    records = read_metrics(trained)
    assert [r["iter"] for r in records] == [0, 2, 4]
    assert all({"PSNR", "SSIM", "L1"} <= set(r) for r in records)
    log = (trained / "train.log").read_text()
    for term in ("loss_d_real", "loss_d_fake", "loss_g_adv", "loss_g_l1", "lr_generator", "lr_discriminator"):
        assert term in log


def test_checkpoint_holds_generator_discriminator_ema_optimizers_and_schedulers(trained):
    state = load_checkpoint(trained / "checkpoints/iter_4.pth")
    prefixes = {key.split(".")[0] for key in state["task"]}
    assert {"generator", "discriminator", "ema", "adversary"} <= prefixes
    assert any(key.startswith("ema.generator.") for key in state["task"])
    assert int(state["task"]["adversary.d_steps.count"]) == int(state["task"]["ema.updates.count"]) == 4
    assert set(state["optim"]["optimizers"]) == {"generator", "discriminator"}
    assert set(state["optim"]["schedulers"]) == {"generator", "discriminator"}
    assert all(s["state"] for s in state["optim"]["optimizers"].values())  # Adam moments were saved


def test_tensorboard_has_input_output_target_grids(trained):
    events = EventAccumulator(str(trained / "tensorboard"), size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    assert {"train/loss_d_real", "train/loss_g_l1", "train/lr_generator", "val/PSNR"} <= set(events.Tags()["scalars"])
    grids = events.Images("val/samples")
    assert [g.step for g in grids] == [0, 2, 4]
    assert (grids[-1].width, grids[-1].height) == (3 * 32, 4 * 32)  # input | output | target, 4 rows


def test_test_tool_reproduces_the_last_evaluation_and_saves_panels(trained, tmp_path):
    show = tmp_path / "show"
    result = run_forked_tool("test", "--config", CONFIG, "--checkpoint", trained / "checkpoints/iter_4.pth",
                             "--work-dir", tmp_path, "--show-dir", show, *TINY, folder=tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert "PSNR" in result.stdout and "SSIM" in result.stdout
    tested = json.loads((tmp_path / "metrics.json").read_text())
    last = read_metrics(trained)[-1]
    for key in ("PSNR", "SSIM", "L1"):
        assert tested[key] == pytest.approx(last[key], abs=1e-6)
    panels = sorted(show.glob("*.png"))
    assert len(panels) == 8 and cv2.imread(str(panels[0])).shape == (32, 3 * 32, 3)


def test_resume_continues_exactly(trained, tmp_path):
    """Resumed from iteration 2 into a new work dir, the run ends where the fixture's
    uninterrupted run did, bit for bit: both run one torch thread (the fork server sets it), and
    the generator's dropout needs the random state of iteration 2 restored."""
    resumed = run_forked_tool("train", "--config", CONFIG, "--work-dir", tmp_path / "resumed", *TINY,
                              "--resume", trained / "checkpoints/iter_2.pth", folder=tmp_path / "out")
    assert resumed.returncode == 0, resumed.stderr
    assert "iter_2.pth at iteration 2" in resumed.stdout
    expected = load_checkpoint(trained / "checkpoints/iter_4.pth")
    got = load_checkpoint(tmp_path / "resumed/checkpoints/iter_4.pth")
    assert got["task"].keys() == expected["task"].keys()
    for key, value in expected["task"].items():
        torch.testing.assert_close(got["task"][key], value, atol=0, rtol=0, msg=named(key))
    assert torch.equal(got["rng"][0]["torch"], expected["rng"][0]["torch"])


@pytest.mark.parametrize("overrides, needles", [
    (["optimizers.generator.params=generatr"],
     ["optimizers.generator.params", "no submodule 'generatr'", "did you mean 'generator'"]),
    (["optimizers.discriminator.params=generator"],
     ["optimizers.discriminator.params", "already optimized by 'generator'"]),
    (["task.gan_loss=hing"], ["task (GANTask): gan_loss", "unknown GAN loss 'hing'", "did you mean 'hinge'"]),
])
def test_misconfigurations_fail_early_with_one_line(tmp_path, overrides, needles):
    result = call_tool("train", "--config", CONFIG, "--work-dir", tmp_path, *TINY, *overrides)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert not (tmp_path / "checkpoints").exists()


# ----------------------------------------------------------------------------- networks


@pytest.mark.parametrize("node", [
    {"type": "UNetGenerator", "base_channels": 4, "num_downs": 5, "dropout": 0.5},
    {"type": "UNetGenerator", "base_channels": 4, "num_downs": 5, "norm": "in"},
    {"type": "ResnetGenerator", "base_channels": 4, "num_blocks": 2},
])
def test_generators_keep_the_size_and_end_in_tanh(node):
    generator = MODELS.build(node).eval()
    out = generator(torch.randn(2, 3, 32, 32) * 3)
    assert out.shape == (2, 3, 32, 32) and out.abs().max() <= 1


def test_an_image_size_the_generator_cannot_halve_is_a_config_error():
    generator = MODELS.build({"type": "UNetGenerator", "base_channels": 4, "num_downs": 6})
    with pytest.raises(DataError, match=r"UNetGenerator: a 32x32 input is not a multiple of 2\^num_downs=64"):
        generator(torch.randn(1, 3, 32, 32))


def test_patchgan_sees_70x70_patches():
    discriminator = MODELS.build({"type": "PatchGANDiscriminator", "base_channels": 4, "norm": "none"}).eval()
    image = torch.randn(1, 6, 160, 160, requires_grad=True)
    logits = discriminator(image)
    centre = logits.shape[-1] // 2
    logits[0, 0, centre, centre].backward()
    rows, cols = torch.nonzero(image.grad.abs().sum(dim=(0, 1))).unbind(1)
    assert (rows.max() - rows.min() + 1, cols.max() - cols.min() + 1) == (70, 70)


# ----------------------------------------------------------------------------- datasets


def test_aligned_pairs_split_a_and_b_and_flip_them_together(tmp_path):
    folder = tmp_path / "facades" / "train"
    folder.mkdir(parents=True)
    a = np.zeros((16, 16, 3), np.uint8)
    a[:, :4] = 255  # a bar on the left of A only
    b = np.full((16, 16, 3), 80, np.uint8)
    b[:, :4] = 10
    cv2.imwrite(str(folder / "1.png"), np.concatenate([a, b], axis=1))
    pairs = DATASETS.build({"type": "AlignedPairs", "root": str(tmp_path / "facades"),
                            "pipeline": [{"type": "HorizontalFlip", "p": 1.0}]})
    sample = pairs[(0, 3)]
    assert sample["input"].shape == sample["target"].shape == (3, 16, 16) and sample["name"] == "1"
    assert sample["input"][:, :, -4:].eq(255).all() and sample["input"][:, :, :-4].eq(0).all()
    assert sample["target"][:, :, -4:].eq(10).all() and sample["target"][:, :, :-4].eq(80).all()
    swapped = DATASETS.build({"type": "AlignedPairs", "root": str(tmp_path / "facades"), "direction": "BtoA"})[0]
    assert swapped["input"][:, 0, 0].tolist() == [10, 10, 10] and swapped["target"][:, 0, 0].tolist() == [255] * 3


def test_folder_pairs_name_a_missing_target(tmp_path):
    for folder in ("A", "B"):
        (tmp_path / folder).mkdir()
    for name in ("x", "y"):
        cv2.imwrite(str(tmp_path / "A" / f"{name}.png"), np.zeros((8, 8, 3), np.uint8))
    cv2.imwrite(str(tmp_path / "B" / "x.jpg"), np.zeros((8, 8, 3), np.uint8))
    with pytest.raises(DataError, match=r"B: no target image for 1 sample\(s\): y"):
        DATASETS.build({"type": "FolderPairs", "root": str(tmp_path)})


def test_synthetic_pairs_are_a_function_of_seed_and_index():
    pairs = DATASETS.build({"type": "SyntheticPairs", "num_samples": 4, "size": 32, "seed": 3})
    again = DATASETS.build({"type": "SyntheticPairs", "num_samples": 4, "size": 32, "seed": 3})
    first, second = pairs[2], again[2]
    assert torch.equal(first["input"], second["input"]) and torch.equal(first["target"], second["target"])
    assert first["input"].dtype == first["target"].dtype == torch.uint8
    assert len(torch.unique(first["input"].flatten(1), dim=1)) <= 4  # a label map: one colour per class


def test_label_map_generator_states_its_label_channels_and_checks_the_network():
    """pix2pixHD's global generator in the synthesis task: the wrapper adds no parameters, takes the
    network's size divisor, and refuses a network whose first convolution takes other channels."""
    network = {"type": "ResnetGenerator", "in_channels": 5, "base_channels": 8, "num_blocks": 1, "num_downsampling": 2}
    wrapped = MODELS.build({"type": "LabelMapGenerator", "num_classes": 4, "contain_dontcare_label": True,
                            "network": network}, path="task.generator")
    assert (wrapped.num_classes, wrapped.noise_dim, wrapped.size_divisor) == (4, 0, 4)
    assert sum(p.numel() for p in wrapped.parameters()) == sum(p.numel() for p in wrapped.network.parameters())
    assert wrapped(torch.zeros(1, 5, 8, 12)).shape == (1, 3, 8, 12)
    with pytest.raises(ConfigError, match=r"task.generator.*first convolution takes 5 channels; the label maps give 4 "
                                        r"\(num_classes 4, contain_dontcare_label False, instance_edges False\): set the "
                                        r"network's in_channels to 4"):
        MODELS.build({"type": "LabelMapGenerator", "num_classes": 4, "network": network}, path="task.generator")
