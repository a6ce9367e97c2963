"""Every claimed training feature on every shipped config (configs/ and projects/*/configs), not
on a test-only config: gradient accumulation with an exact resume here; two processes and bf16 AMP
where the CPU computes it in tests/test_shipped_features_parallel.py (a file of its own, so that
the suite's two workers share the configs' runs). Both shipped synthesis configs once crashed at iteration 1 with
`train.accumulate=2` (their generators' BatchNorm), while accumulation was tested on a config with
instance norm.

Each config runs as shipped but for the walk's shrinking (tests/test_tools_walk.py: a few samples,
batches of 2, no downloaded weights, ResNet-18 for deeper ResNet encoders) and no metrics (the
synthesis configs' judge is another run's checkpoint). Weights must stay finite and, for the
resume, equal the uninterrupted run's bit for bit (`deterministic: true`, as README promises)."""

import shutil
from pathlib import Path

import pytest
import torch
from test_resume import assert_same_state
from test_tools_walk import SHIPPED, TINY_RUN, config_id, task_class, walk_overrides

from framework.config import load_config, to_plain
from published_fixtures import reads_published_data
from support import call_tool

ACCUMULATED = ["train.accumulate=2", "deterministic=true", "train.max_iters=2", "train.ckpt_interval=1",
               "metrics=[]", "train.best_metric=null"]


def overrides(config: Path, tmp: Path, samples: int = 3) -> list[str]:
    from framework.tasks.base import GeneratorTask

    gan = issubclass(task_class(load_config(str(config))), GeneratorTask)
    return [*TINY_RUN, *walk_overrides(config, tmp, segmentation=not gan, samples=samples)]


def published(config: Path) -> bool:
    return reads_published_data(to_plain(load_config(str(config))))


# The configs on published datasets (the papers' recipes, on fixture trees) are the heaviest: their
# accumulation and two processes run in tests/test_shipped_features_published.py, a file of its own
# so that the suite's two workers share the configs' runs.
OWN_DATA = [config for config in SHIPPED if not published(config)]
PUBLISHED = [config for config in SHIPPED if published(config)]


def trained(work_dir: Path, iteration: int) -> dict:
    return torch.load(work_dir / "checkpoints" / f"iter_{iteration}.pth", weights_only=True)


def assert_finite(state: dict) -> None:
    for key, value in state.items():
        assert not value.is_floating_point() or torch.isfinite(value).all(), f"{key} is not finite"


@pytest.mark.parametrize("config", OWN_DATA, ids=config_id)
def test_accumulation_trains_and_resumes_exactly_on_every_shipped_config(config, tmp_path):
    args = overrides(config, tmp_path)
    whole = tmp_path / "whole"
    result = call_tool("train", "--config", config, "--work-dir", whole, *args, *ACCUMULATED)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "x 2 accumulated" in (whole / "train.log").read_text()
    assert_finite(trained(whole, 2)["task"])
    resumed = tmp_path / "resumed"
    (resumed / "checkpoints").mkdir(parents=True)
    shutil.copy(whole / "checkpoints/iter_1.pth", resumed / "checkpoints/iter_1.pth")
    (resumed / "checkpoints/latest").write_text("iter_1.pth")
    result = call_tool("train", "--config", config, "--work-dir", resumed, "--resume", *args, *ACCUMULATED)
    assert result.returncode == 0, result.stderr[-3000:]
    for part in ("task", "optim"):
        assert_same_state(trained(resumed, 2)[part], trained(whole, 2)[part], part)


def test_every_shipped_config_is_covered():
    names = {path.stem for path in SHIPPED}
    assert {"oasis_textures", "spade_textures", "pix2pix_shapes", "cyclegan_shapes", "dcgan_shapes",
            "unet_shapes"} <= names
    assert all("max_iters" in to_plain(load_config(str(path)))["train"] for path in SHIPPED)
