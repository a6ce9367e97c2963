"""The GAN task of docs/extending.md, written from the page's own code blocks (its imports and the
blocks of "A GAN task, from the parts"), trained with a gradient penalty, then run through every
tool: what it does not write (pictures, health warnings, double backward) it gets from its parts.

A task written from the guide once trained without pictures (`test.py --show-dir` ended with
status 0 and an empty folder, TensorBoard had no samples) or warnings, and failed at start-up
under WGAN-GP ("element 0 of tensors does not require grad")."""

import json
import logging

import cv2
import numpy as np
import pytest
import torch
from torch import nn

from framework.errors import ConfigError
from framework.registry import TASKS
from framework.tasks.base import GeneratorTask, Task
from framework.tasks.derived import sample_rows
from support import REPO, call_tool, code_blocks

SECTION = "A GAN task, from the parts"
TASK = "PairedTranslationTask"
TINY = ["device=cpu", "amp.enabled=false", "train.max_iters=2", "train.val_interval=2", "train.val_at_start=false",
        "train.ckpt_interval=2", "train.log_interval=1", "data.train.dataset.num_samples=8",
        "data.train.batch_size=4", "data.train.num_workers=0", "data.val.dataset.num_samples=3",
        "data.val.batch_size=3", "data.val.num_workers=0"]


def guide_module() -> str:
    """The page's imports block and the GAN section's python blocks, in order (the section needs
    nothing from the segmentation blocks between them)."""
    imports = [block for block in code_blocks("extending.md", "python") if "    ...\n" not in block][0]
    return "\n\n".join([imports, *code_blocks("extending.md", "python", SECTION)])


@pytest.fixture(scope="module")
def guide(tmp_path_factory):
    """The guide's task trained two iterations under WGAN-GP (a penalty: double backward)."""
    folder = tmp_path_factory.mktemp("guide_gan")
    (folder / "my_modules.py").write_text(guide_module())
    (config,) = code_blocks("extending.md", "yaml", SECTION)
    (folder / "gan.yaml").write_text(config.replace("projects/pix2pix/configs/", f"{REPO}/projects/pix2pix/configs/"))
    trained = call_tool("train", "--config", folder / "gan.yaml", "--work-dir", folder / "run", *TINY,
                        "task.gan_loss=wgan-gp")
    return folder, trained


def checkpoint_args(folder):
    return ["--config", folder / "gan.yaml", "--checkpoint", folder / "run" / "checkpoints" / "iter_2.pth"]


def test_the_guides_gan_task_trains_under_wgan_gp_with_samples_in_tensorboard(guide):
    folder, trained = guide
    assert trained.returncode == 0, trained.stderr + trained.stdout[-2000:]
    log = (folder / "run" / "train.log").read_text()
    assert "task: type GANTask -> PairedTranslationTask replaces the base's node" in log  # as the guide says
    assert "loss_d_gp" in log and "loss_g_l1" in log  # the penalty the loss declared; the task's own term
    events = b"".join(path.read_bytes() for path in (folder / "run" / "tensorboard").rglob("events*"))
    assert b"val/samples" in events  # drawn by GeneratorTask's default from val_step's images
    assert "no evaluation samples" not in log


def test_the_guides_gan_task_runs_every_tool(guide, tmp_path):
    folder, trained = guide
    assert trained.returncode == 0, trained.stderr
    show = tmp_path / "show"
    tested = call_tool("test", *checkpoint_args(folder), "--work-dir", tmp_path / "test", "--show-dir", show, *TINY)
    assert tested.returncode == 0, tested.stderr
    pictures = sorted(show.glob("*.png"))
    assert len(pictures) == 3  # one per evaluated sample: input | fake | real
    assert cv2.imread(str(pictures[0])).shape == (64, 3 * 64, 3)
    assert {"PSNR", "SSIM", "L1"} <= json.loads((tmp_path / "test" / "metrics.json").read_text()).keys()

    cv2.imwrite(str(tmp_path / "photo.png"), np.random.default_rng(0).integers(0, 256, (33, 35, 3), dtype=np.uint8))
    inferred = call_tool("infer", "--input", tmp_path / "photo.png", *checkpoint_args(folder),
                         "--output", tmp_path / "infer")
    assert inferred.returncode == 0, inferred.stderr
    (written,) = (tmp_path / "infer").rglob("*.png")
    assert cv2.imread(str(written)).shape[:2] == (33, 35)

    exported = call_tool("export", *checkpoint_args(folder), "--format", "torchscript", "--size", "33", "35",
                         "--output", tmp_path / "model.pt")
    assert exported.returncode == 0, exported.stderr
    assert "on input (1, 3, 33, 35)" in exported.stdout

    analyzed = call_tool("analyze_model", *checkpoint_args(folder), "--size", "64", "64", "--json",
                         tmp_path / "analysis.json", "--depth", "0")
    assert analyzed.returncode == 0, analyzed.stderr
    assert set(json.loads((tmp_path / "analysis.json").read_text())) == {"generator", "discriminator"}

    refused = call_tool("infer", "--input", tmp_path / "photo.png", *checkpoint_args(folder),
                        "--output", tmp_path / "infer_b", "--direction", "BtoA")
    assert refused.returncode == 2  # check_direction: a one-generator task
    assert refused.stderr.startswith("error: --direction: PairedTranslationTask has one generator")


def guide_task(**settings) -> GeneratorTask:
    return TASKS.get(TASK)(generator=nn.Conv2d(3, 3, 1), discriminator=nn.Conv2d(6, 1, 1), **settings)


def test_the_guides_gan_task_derives_double_backward_and_warnings_from_its_adversary(guide):
    assert not guide_task(gan_loss="hinge").uses_double_backward
    assert guide_task(gan_loss="wgan-gp").uses_double_backward  # its loss needs a gradient penalty
    assert guide_task(gan_loss="hinge", r1_weight=1.0).uses_double_backward
    task = guide_task(gan_loss="hinge")
    logged = {"loss_d": 1e-4, "d_real_logit": 9.0, "d_fake_logit": -9.0, "fake_spread": 1e-4}
    warnings = [task.diagnose(logged) for _ in range(3)][-1]  # the health checks' window: 3 log intervals
    assert [warning.split(":")[1].strip() for warning in warnings] == [
        "the discriminator wins outright", "the generator's outputs collapse"]


def test_a_task_without_pictures_says_so(guide, tmp_path, caplog):
    task = guide_task()
    batch = {"name": ["a.png"], "index": torch.tensor([0])}
    with pytest.raises(ConfigError, match=r"^--show-dir: nothing to write: PairedTranslationTask's val_step returns "
                                          r"no \"fake\" image"):
        task.save_visuals(batch, {"real": torch.rand(1, 3, 8, 8)}, tmp_path)
    with pytest.raises(ConfigError, match=r"^--show-dir: Task writes no pictures \(it defines no save_visuals\)$"):
        Task().save_visuals(batch, {}, tmp_path)
    assert not list(tmp_path.iterdir())
    framework_logger = logging.getLogger("framework")  # a run's logging stops it propagating to the root
    framework_logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.WARNING, logger="framework"):
            assert sample_rows(task, {"real": torch.rand(1, 3, 8, 8)}, 4) == {}
            assert sample_rows(task, {"real": torch.rand(1, 3, 8, 8)}, 4) == {}
            assert PlainTask().visualize({}, {}, 4) == PlainTask().visualize({}, {}, 4) == {}
    finally:
        framework_logger.removeHandler(caplog.handler)
    assert [record.getMessage() for record in caplog.records] == [  # once per task class, not at every evaluation
        "warning: no evaluation samples in TensorBoard: PairedTranslationTask's val_step returns no \"fake\" image "
        "(N x 3 x H x W, floats in [0, 1]) to draw, and the task defines no visualize / save_visuals of its own",
        "warning: no evaluation samples in TensorBoard: PlainTask defines no visualize(batch, outputs, max_images)"]
    with pytest.raises(ConfigError, match=r"^Task does not say which networks it runs: it defines no network_examples"):
        Task().network_examples(64, 64)


class PlainTask(Task):
    """A task of the user's straight from `Task`, without pictures of its own."""


def test_the_pictures_join_the_images_val_step_returns(guide, tmp_path):
    """A row per sample: input | fake | real where given; a grey input widened to RGB; an input of
    another size (a label map, a smaller condition) left out; named after the sample's index."""
    fake, real = torch.rand(2, 3, 8, 8), torch.rand(2, 3, 8, 8)
    grey = torch.rand(2, 1, 8, 8)
    rows = guide_task().visualize({}, {"input": grey, "fake": fake, "real": real}, 1)["samples"]
    assert torch.equal(rows, torch.cat([grey[0].expand(3, -1, -1), fake[0], real[0]], dim=2))
    rows = guide_task().visualize({}, {"input": torch.rand(2, 3, 4, 4), "fake": fake}, 2)["samples"]
    assert torch.equal(rows, torch.cat([fake[0], fake[1]], dim=1))
    guide_task().save_visuals({"index": torch.tensor([7, 9])}, {"fake": fake, "real": real}, tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["000007.png", "000009.png"]
    assert cv2.imread(str(tmp_path / "000009.png")).shape == (8, 16, 3)


def test_show_dir_left_empty_by_a_tasks_save_visuals_is_an_error(guide, tmp_path, monkeypatch):
    folder, trained = guide
    assert trained.returncode == 0, trained.stderr
    monkeypatch.setattr(TASKS.get(TASK), "save_visuals", lambda self, batch, outputs, show: None)
    tested = call_tool("test", *checkpoint_args(folder), "--work-dir", tmp_path / "test", "--show-dir",
                       tmp_path / "show", *TINY)
    assert tested.returncode == 2
    assert tested.stderr.strip() == (f"error: --show-dir {tmp_path / 'show'}: PairedTranslationTask's save_visuals "
                                     "wrote no file there")
    assert (tmp_path / "test" / "metrics.json").is_file()  # the evaluation itself is kept
