"""Seeding and the generator states a checkpoint carries (framework/engine/random_state.py):
restoring a saved state replays exactly the draws that followed it, in python, numpy (including
its cached Gaussian) and torch; the state survives a weights_only save/load."""

import io
import os
import random

import numpy as np
import pytest
import torch

from framework.engine.random_state import rng_state, seed_everything, set_rng_state
from support import REPO, run_forked_tool


def draws():
    return (random.random(), random.gauss(0, 1), np.random.rand(3).tolist(), np.random.randn(), np.random.randn(),
            torch.rand(3).tolist())


def test_a_restored_state_replays_the_same_draws_after_a_weights_only_round_trip():
    seed_everything(5)
    np.random.randn()  # numpy now holds a cached second Gaussian: part of the state
    random.gauss(0, 1)  # python too
    buffer = io.BytesIO()
    torch.save(rng_state(), buffer)
    expected = draws()
    draws()  # move every generator on
    buffer.seek(0)
    set_rng_state(torch.load(buffer, weights_only=True))
    assert draws() == expected


def test_seeding_sets_every_generator():
    seed_everything(7)
    first = draws()
    seed_everything(7)
    assert draws() == first
    random.seed(7), np.random.seed(7), torch.manual_seed(7)
    assert draws() == first  # rank 0: exactly the seed
    seed_everything(8)
    assert draws() != first


def test_a_seed_past_numpys_range_wraps_for_numpy_only():
    """Any seed >= 0 is valid (train.seed); numpy takes seeds below 2**32, so it gets seed % 2**32."""
    seed_everything(2**32 + 5)
    ours = (np.random.rand(), torch.rand(1).item(), random.random())
    np.random.seed(5), torch.manual_seed(2**32 + 5), random.seed(2**32 + 5)
    assert ours == (np.random.rand(), torch.rand(1).item(), random.random())


def test_the_numpy_state_is_stored_as_int64():
    """The checkpoint format (tests/data holds a 0.2.0 checkpoint): numpy's key as an int64 tensor."""
    state = rng_state()
    assert state["numpy"].dtype == torch.int64 and state["numpy"].shape == (624,)


@pytest.fixture
def deterministic_restored():
    before = torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic, \
        torch.backends.cudnn.benchmark
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    yield
    torch.use_deterministic_algorithms(before[0], warn_only=warn_only)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[1], before[2]


def test_deterministic_turns_on_deterministic_algorithms(deterministic_restored, monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    torch.use_deterministic_algorithms(False)
    seed_everything(0)
    assert not torch.are_deterministic_algorithms_enabled()
    seed_everything(0, deterministic=True)
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.deterministic is True and torch.backends.cudnn.benchmark is False
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


def test_deterministic_warn_warns_where_true_refuses_and_false_resets_the_mode(deterministic_restored):
    """`deterministic: warn` is true's mode with torch's warn_only (an operation without a
    deterministic kernel runs, with a warning); a later run with `false` in the same process
    gets torch's defaults back, not the previous run's mode."""
    seed_everything(0, deterministic="warn")
    assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
    assert torch.backends.cudnn.deterministic is True
    seed_everything(0, deterministic=True)
    assert torch.are_deterministic_algorithms_enabled() and not torch.is_deterministic_algorithms_warn_only_enabled()
    seed_everything(0)
    assert not torch.are_deterministic_algorithms_enabled() and torch.backends.cudnn.deterministic is False


UNPOOLING_RUN = ["device=cpu", "custom_imports=[probes]", "task.model={type: UnpoolingNet, num_classes: 4}",
                 "train.max_iters=2", "train.val_interval=0", "data.train.dataset.num_samples=8",
                 "data.train.batch_size=4", "data.train.num_workers=0"]


@pytest.mark.parametrize("mode, trains", [("true", False), ("warn", True)])
def test_an_operation_without_a_deterministic_kernel_fails_a_deterministic_run_and_warns_under_warn(
        tmp_path, mode, trains):
    """Max-unpooling (SegNet's decoder) has no deterministic kernel in torch, on the CPU too, like
    bilinear upsampling's backward on CUDA: `true` stops the run at it, `warn` trains and names it."""
    result = run_forked_tool("train", "--config", REPO / "configs/segmentation/unet_shapes.yaml", "--work-dir",
                             tmp_path / "run", *UNPOOLING_RUN, f"deterministic={mode}", cwd=REPO / "tests",
                             folder=tmp_path / "out")
    assert (result.returncode == 0) is trains, result.stderr[-2000:]
    assert "max_unpooling2d" in result.stderr  # torch's error, or its warning, names the operation
    assert (tmp_path / "run/checkpoints/iter_2.pth").is_file() is trains
