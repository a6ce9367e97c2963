"""Every tool on every shipped GAN config: each task answers through the GeneratorTask interface
(which generator, what it takes, its networks' example inputs), so none of the tools asks a task
for an attribute only some tasks have (analyze_model once crashed on CycleGAN that way).

Each config is trained for one iteration, then tools/analyze_model.py, infer.py, export.py and
test.py run on its checkpoint and their outputs are read back."""

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from framework.config import load_config
from framework.config.custom_imports import import_custom_modules
from framework.registry import TASKS
from framework.tasks.base import GeneratorTask
from support import REPO, call_tool

TINY = ["device=cpu", "amp.enabled=false", "train.max_iters=1", "train.ckpt_interval=1", "train.val_interval=0",
        "train.val_at_start=false", "train.log_interval=1", "data.train.num_workers=0", "data.val.num_workers=0",
        "data.train.batch_size=2", "data.val.batch_size=4", "data.train.dataset.num_samples=4",
        "data.val.dataset.num_samples=4", "loggers=[]"]


def task_class(path: Path) -> type:
    cfg = load_config(str(path))
    import_custom_modules(cfg)
    return TASKS.get(cfg.task.type)


def shipped_gan_configs() -> list[Path]:
    return [path for path in sorted((REPO / "projects").glob("*/configs/*.yaml"))
            if issubclass(task_class(path), GeneratorTask)]


CONFIGS = shipped_gan_configs()


def test_every_gan_project_config_is_walked():
    names = {path.stem for path in CONFIGS}
    assert {"pix2pix_shapes", "pix2pixhd_shapes", "cyclegan_shapes", "cyclegan_shapes_toolkit", "dcgan_shapes",
            "dcgan_small_data", "global_local_gan_pairs"} <= names


@pytest.mark.parametrize("config", CONFIGS, ids=[path.stem for path in CONFIGS])
def test_every_tool_runs_on_a_shipped_gan_config(config, tmp_path):
    run = tmp_path / "run"
    result = call_tool("train", "--config", config, "--work-dir", run, *TINY)
    assert result.returncode == 0, result.stderr + result.stdout[-2000:]
    checkpoint = run / "checkpoints" / "iter_1.pth"
    args = ["--config", config, "--checkpoint", checkpoint]
    direction = ["--direction", "BtoA"] if task_class(config).directions else []

    report = tmp_path / "analysis.json"
    result = call_tool("analyze_model", *args, "--size", "64", "64", "--json", report, "--depth", "0")
    assert result.returncode == 0, result.stderr
    networks = json.loads(report.read_text())
    assert any(name.startswith("generator") for name in networks) and any("discriminator" in name for name in networks)
    assert all(entry["modules"][0]["params"] > 0 and entry["modules"][0]["flops"] > 0 for entry in networks.values())

    infer_args = [*args, "--output", tmp_path / "infer", *direction]
    noise = load_config(str(config)).task.get("latent_dim") is not None
    if noise:
        infer_args += ["--num", "3"]
    else:
        image = np.random.default_rng(0).integers(0, 256, (40, 48, 3), dtype=np.uint8)
        cv2.imwrite(str(tmp_path / "photo.png"), image)
        infer_args += ["--input", tmp_path / "photo.png"]
    result = call_tool("infer", *infer_args)
    assert result.returncode == 0, result.stderr
    written = sorted((tmp_path / "infer").glob("*.png"))
    assert len(written) == (3 if noise else 1)
    image = cv2.imread(str(written[0]))
    assert image is not None and (noise or image.shape[:2] == (40, 48))  # an image keeps its size

    output = tmp_path / "generator.pt"
    result = call_tool("export", *args, "--format", "torchscript", "--size", "64", "64", "--output", output,
                       *direction)
    assert result.returncode == 0, result.stderr
    assert output.stat().st_size > 0

    result = call_tool("test", *args, "--work-dir", tmp_path / "test", "data.val.num_workers=0",
                       "data.val.dataset.num_samples=4", "data.val.batch_size=4", "device=cpu")
    assert result.returncode == 0, result.stderr + result.stdout[-2000:]
