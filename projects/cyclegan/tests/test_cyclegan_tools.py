"""CycleGAN end to end through the command-line tools at a tiny size: training and evaluation of
both directions, TensorBoard rows, tools/test.py panels, infer/export --direction on the trained
model, unpaired evaluation folders (images only)."""

import json

import cv2
import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import framework  # noqa: F401
import projects.cyclegan  # noqa: F401  (registers TwoStyleShapes)
import projects.pix2pix  # noqa: F401  (registers the networks)
from framework.checkpoint.files import load_checkpoint
from framework.engine.trained import load_trained_task
from framework.inference.generator import to_signed, to_unit
from framework.registry import DATASETS
from support import REPO, call_tool, run_forked_tool, train_run

CONFIG = REPO / "projects/cyclegan/configs/cyclegan_shapes.yaml"
NETWORKS = ("generator_ab", "generator_ba", "discriminator_a", "discriminator_b")
TINY = [
    "device=cpu", "task.identity_weight=0.5", "train.max_iters=4", "train.val_interval=2", "train.ckpt_interval=2", "train.log_interval=2",
    "data.train.dataset.num_samples=16", "data.train.dataset.size=32", "data.train.batch_size=2",
    "data.val.dataset.num_samples=4", "data.val.dataset.size=32", "data.val.batch_size=4",
    *[f"task.{net}.base_channels=4" for net in NETWORKS], "task.generator_ab.num_blocks=1",
    "task.generator_ba.num_blocks=1", "+task.ema_decay=0.9", "task.pool_size=3",
    "optimizers.generators.scheduler.decay_start=2", "optimizers.discriminators.scheduler.decay_start=2",
]
TERMS = ("loss_g_ab", "loss_g_ba", "loss_cycle_a", "loss_cycle_b", "loss_idt_a", "loss_idt_b", "loss_d_a", "loss_d_b")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_run(tmp_path_factory.mktemp("cyclegan"), CONFIG, *TINY, runner=run_forked_tool)


def read_metrics(work_dir):
    return [json.loads(line) for line in (work_dir / "metrics.jsonl").read_text().splitlines()]


def test_evaluates_both_directions_and_logs_every_term(trained):
    records = read_metrics(trained)
    assert [r["iter"] for r in records] == [0, 2, 4]
    assert all({"PSNR_ab", "PSNR_ba", "SSIM_ab", "SSIM_ba", "L1_ab", "L1_ba"} <= set(r) for r in records)
    log = (trained / "train.log").read_text()
    for term in (*TERMS, "fake_spread_a", "d_real_logit_b", "lr_generators", "lr_discriminators"):
        assert term in log


def test_checkpoint_holds_four_networks_two_emas_and_each_ranks_pools(trained):
    state = load_checkpoint(trained / "checkpoints/iter_4.pth")
    prefixes = {key.split(".")[0] for key in state["task"]}
    assert {*NETWORKS, "ema", "adversary_a", "adversary_b"} <= prefixes
    assert any(key.startswith("ema.generator_ab.") for key in state["task"])
    assert any(key.startswith("ema.generator_ba.") for key in state["task"])
    assert int(state["task"]["adversary_a.d_steps.count"]) == int(state["task"]["ema.updates.count"]) == 4
    assert set(state["optim"]["optimizers"]) == {"generators", "discriminators"}
    pools = state["task_by_rank"][0]
    assert pools["pool_a"]["images"].shape == (3, 3, 32, 32) and pools["pool_b"]["images"].shape == (3, 3, 32, 32)


def test_tensorboard_has_rows_of_both_directions(trained):
    events = EventAccumulator(str(trained / "tensorboard"), size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    assert {"train/loss_cycle_a", "train/loss_idt_b", "val/PSNR_ab", "val/SSIM_ba"} <= set(events.Tags()["scalars"])
    for tag in ("val/samples_a", "val/samples_b"):
        grids = events.Images(tag)
        assert [g.step for g in grids] == [0, 2, 4]
        assert (grids[-1].width, grids[-1].height) == (3 * 32, 4 * 32)  # A | G_ab(A) | G_ba(G_ab(A)), 4 rows


def test_test_tool_reproduces_the_evaluation_and_saves_rows(trained, tmp_path):
    show = tmp_path / "show"
    result = run_forked_tool("test", "--config", CONFIG, "--checkpoint", trained / "checkpoints/iter_4.pth",
                             "--work-dir", tmp_path, "--show-dir", show, *TINY, folder=tmp_path / "out")
    assert result.returncode == 0, result.stderr
    tested = json.loads((tmp_path / "metrics.json").read_text())
    for key in ("PSNR_ab", "PSNR_ba", "L1_ab"):
        assert tested[key] == pytest.approx(read_metrics(trained)[-1][key], abs=1e-6)
    names = sorted(p.name for p in show.glob("*.png"))
    assert names == sorted(f"shapes_{i:06d}_{d}.png" for i in range(4) for d in ("AtoB", "BtoA"))
    assert cv2.imread(str(show / "shapes_000000_BtoA.png")).shape == (32, 3 * 32, 3)


def expected_translation(trained, direction, image):
    task, _ = load_trained_task(str(CONFIG), str(trained / "checkpoints/iter_4.pth"), TINY, torch.device("cpu"))
    ema = task.ema["generator_ab" if direction == "AtoB" else "generator_ba"]
    with torch.no_grad():
        out = to_unit(ema(to_signed(torch.from_numpy(image).permute(2, 0, 1)[None])))
    return (out[0] * 255).round().byte().permute(1, 2, 0).numpy()


@pytest.mark.parametrize("direction, domain", [("AtoB", "a"), ("BtoA", "b")])
def test_infer_translates_with_the_ema_generator_of_the_direction(trained, tmp_path, direction, domain):
    sample = DATASETS.get("TwoStyleShapes")(num_samples=2, size=32, paired=True)[1]
    image = sample[domain].permute(1, 2, 0).numpy()
    cv2.imwrite(str(tmp_path / "in.png"), image[..., ::-1])
    result = call_tool("infer", "--config", CONFIG, "--checkpoint", trained / "checkpoints/iter_4.pth",
                       "--input", tmp_path / "in.png", "--output", tmp_path / "out", "--direction", direction,
                       "--device", "cpu", *TINY)
    assert result.returncode == 0, result.stderr
    written = cv2.imread(str(tmp_path / "out/in.png"))[..., ::-1]
    difference = np.abs(written.astype(int) - expected_translation(trained, direction, image).astype(int))
    assert difference.max() <= 1  # rounding of the last bit


def test_infer_and_export_need_a_direction_for_a_two_way_task(trained, tmp_path):
    checkpoint = trained / "checkpoints/iter_4.pth"
    infer = call_tool("infer", "--config", CONFIG, "--checkpoint", checkpoint, "--input", tmp_path,
                      "--output", tmp_path / "out", "--device", "cpu", *TINY)
    export = call_tool("export", "--config", CONFIG, "--checkpoint", checkpoint, "--format", "torchscript",
                       "--output", tmp_path / "g.pt", *TINY)
    for result in (infer, export):
        assert result.returncode == 2
        assert "--direction: CycleGANTask translates both ways; choose AtoB or BtoA" in result.stderr
    assert not (tmp_path / "g.pt").exists()


def test_export_writes_the_generator_of_the_direction(trained, tmp_path):
    result = call_tool("export", "--config", CONFIG, "--checkpoint", trained / "checkpoints/iter_4.pth",
                       "--format", "torchscript", "--output", tmp_path / "g_ba.pt", "--size", "32", "32",
                       "--direction", "BtoA", *TINY)
    assert result.returncode == 0, result.stderr
    exported = torch.jit.load(str(tmp_path / "g_ba.pt"))
    image = DATASETS.get("TwoStyleShapes")(num_samples=1, size=32, paired=True)[0]["b"].permute(1, 2, 0).numpy()
    out = exported(torch.from_numpy(image).permute(2, 0, 1)[None].float())
    expected = expected_translation(trained, "BtoA", image)
    got = (out[0] * 255).round().byte().permute(1, 2, 0).numpy()
    assert np.abs(got.astype(int) - expected.astype(int)).max() <= 1


def test_unpaired_evaluation_folders_log_rows_only(tmp_path):
    for folder, names in (("testA", ["x", "y"]), ("testB", ["p", "q", "r"])):
        (tmp_path / folder).mkdir()
        for i, name in enumerate(names):
            cv2.imwrite(str(tmp_path / folder / f"{name}.png"), np.full((32, 32, 3), 40 * i, np.uint8))
    val = f"data.val.dataset={{type: UnpairedImageFolders, root: '{tmp_path}', split: test}}"
    work_dir = train_run(tmp_path / "run", CONFIG, *TINY, val, "train.max_iters=1", "train.best_metric=null",
                         "optimizers.generators.scheduler=null", "optimizers.discriminators.scheduler=null")
    records = read_metrics(work_dir)
    assert [r["iter"] for r in records] == [0, 1]
    assert not any(key.startswith(("PSNR", "SSIM", "L1")) for r in records for key in r)
    events = EventAccumulator(str(work_dir / "tensorboard"), size_guidance={"images": 0})
    events.Reload()
    assert len(events.Images("val/samples_b")) == 2
    assert "needs evaluation samples that pair by name" in (work_dir / "train.log").read_text()
