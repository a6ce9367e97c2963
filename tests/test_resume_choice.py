"""framework/engine/resume.py called directly: which checkpoint a run resumes from (--resume,
auto_resume, torchrun and Slurm restarts), the config differences it warns about, and the one
line when a checkpoint does not fit. Written against the survivors of
`python tests/scripts/mutation.py engine.resume`; tests/test_resume.py resumes real runs."""

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from framework.checkpoint import files as ckpt
from framework.engine.resume import auto_resume_enabled, checkpoint_to_resume, config_changes, resume_trainer
from framework.errors import CheckpointError

RESTARTS = ("TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT")


@pytest.fixture
def no_restart(monkeypatch):
    for name in RESTARTS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize("name", RESTARTS)
@pytest.mark.parametrize("count, resumes", [("1", True), ("3", True), ("0", False), ("", False)])
def test_auto_resumes_after_a_restart_of_torchrun_or_slurm(no_restart, name, count, resumes):
    no_restart.setenv(name, count)
    assert auto_resume_enabled("auto") is resumes


def test_auto_resume_true_false_and_auto_without_a_restart(no_restart):
    assert auto_resume_enabled("auto") is False
    assert auto_resume_enabled(True) is True and auto_resume_enabled(False) is False
    no_restart.setenv("SLURM_RESTART_COUNT", "1")
    assert auto_resume_enabled(False) is False  # only "auto" looks at restarts


def run_with_checkpoints(tmp_path, *iterations):
    folder = tmp_path / "checkpoints"
    for it in iterations:
        ckpt.save_checkpoint({"meta": {"iter": it}, "task": {}, "optim": {}, "rng": {}}, folder / f"iter_{it}.pth")
    return tmp_path


def test_resume_path_latest_or_nothing(tmp_path, no_restart):
    work_dir = run_with_checkpoints(tmp_path, 2, 4)
    for given in (str(work_dir / "checkpoints/iter_2.pth"), work_dir / "checkpoints/iter_2.pth"):
        path, state = checkpoint_to_resume(str(work_dir), given, False)
        assert path == work_dir / "checkpoints/iter_2.pth" and state["meta"] == {"iter": 2}
    for resume, auto in ((True, False), (None, True), (False, "auto")):
        if auto == "auto":
            no_restart.setenv("TORCHELASTIC_RESTART_COUNT", "1")
        path, state = checkpoint_to_resume(str(work_dir), resume, auto)
        assert path == work_dir / "checkpoints/iter_4.pth" and state["meta"] == {"iter": 4}
    no_restart.delenv("TORCHELASTIC_RESTART_COUNT")
    assert checkpoint_to_resume(str(work_dir), None, "auto") is None  # checkpoints, but no restart
    assert checkpoint_to_resume(str(work_dir), False, False) is None


def test_resume_without_a_checkpoint_is_an_error_and_auto_resume_starts_afresh(tmp_path, no_restart):
    with pytest.raises(CheckpointError, match=f"^--resume: no checkpoint to resume from in {re.escape(str(tmp_path / 'checkpoints'))}$"):
        checkpoint_to_resume(str(tmp_path), True, True)
    assert checkpoint_to_resume(str(tmp_path), None, True) is None


def test_the_untrained_start_alone_is_nothing_to_resume(tmp_path, no_restart):
    """iter_0.pth alone: --resume says to train without it, auto_resume starts afresh; with
    iter_1.pth beside it (the first trained checkpoint), both resume iter_1.pth."""
    work_dir = run_with_checkpoints(tmp_path, 0)
    ckpt.write_latest(work_dir / "checkpoints", "iter_0.pth")
    start = work_dir / "checkpoints/iter_0.pth"
    with pytest.raises(CheckpointError, match=f"^--resume: {re.escape(str(start))} is the untrained start "
                       r"\(saved before the first iteration\), nothing to continue: train without --resume$"):
        checkpoint_to_resume(str(work_dir), True, False)
    assert checkpoint_to_resume(str(work_dir), None, True) is None
    path, _ = checkpoint_to_resume(str(work_dir), str(start), False)  # a path given: taken as it is
    assert path == start
    run_with_checkpoints(tmp_path, 1)
    ckpt.write_latest(work_dir / "checkpoints", "iter_1.pth")  # as the checkpoint hook writes it
    for resume, auto in ((True, False), (None, True)):
        path, state = checkpoint_to_resume(str(work_dir), resume, auto)
        assert path == work_dir / "checkpoints/iter_1.pth" and state["meta"] == {"iter": 1}


def test_resume_of_a_run_with_only_best_pth_is_an_error(tmp_path, no_restart):
    ckpt.save_checkpoint({"meta": {"iter": 3}, "task": {}, "optim": {}, "rng": {}}, tmp_path / "checkpoints/best.pth")
    with pytest.raises(CheckpointError, match="^--resume: no checkpoint to resume from in "):
        checkpoint_to_resume(str(tmp_path), True, False)
    assert checkpoint_to_resume(str(tmp_path), None, True) is None


def test_config_changes_name_the_first_differences_in_key_order():
    saved = yaml.safe_dump({"work_dir": "a", "auto_resume": False, "seed": 0,
                            "optim": {"lr": 0.1, "momentum": 0.9}, "train": {"max_iters": 6}})
    same = {"work_dir": "b", "auto_resume": True, "seed": 0, "optim": {"lr": 0.1, "momentum": 0.9},
            "train": {"max_iters": 6}}
    assert config_changes(saved, same) == ""  # where and how it was launched do not count
    now = {"seed": 1, "optim": {"lr": 0.2, "momentum": 0.9, "nesterov": True}, "train": {}}
    assert config_changes(saved, now) == ("optim.lr: 0.1 -> 0.2; optim.nesterov: <absent> -> True; seed: 0 -> 1; "
                                          "train.max_iters: 6 -> <absent>")
    assert config_changes(saved, now, limit=2) == "optim.lr: 0.1 -> 0.2; optim.nesterov: <absent> -> True (and 2 more)"
    assert config_changes(saved, now, limit=4) == config_changes(saved, now)
    assert config_changes("", {"seed": 1}) == "seed: <absent> -> 1"
    six = {f"k{i}": i for i in range(6)}
    assert config_changes("", six) == "; ".join(f"k{i}: <absent> -> {i}" for i in range(5)) + " (and 1 more)"  # 5 by default


class Trainer:
    def __init__(self, error=None):
        self.error, self.loaded = error, None
        self.iter, self.epoch, self.data = 7, 1, SimpleNamespace(batches_in_epoch=2)

    def load_state_dict(self, state):
        if self.error:
            raise self.error
        self.loaded = state


def test_resume_loads_the_state_and_says_so(tmp_path, framework_log):
    state = {"meta": {"config": yaml.safe_dump({"seed": 0, "work_dir": "a"})}, "task": {"w": torch.ones(2)}}
    trainer = Trainer()
    resume_trainer(trainer, tmp_path / "iter_7.pth", state, {"seed": 0, "work_dir": "b"})
    assert trainer.loaded is state
    assert framework_log.messages == [f"resumed from {tmp_path / 'iter_7.pth'} at iteration 7 (epoch 1, 2 batches into it)"]


def test_resume_with_another_config_warns_with_the_differences(tmp_path, framework_log):
    state = {"meta": {"config": yaml.safe_dump({"seed": 0, "optim": {"lr": 0.1}})}}
    resume_trainer(Trainer(), tmp_path / "iter_7.pth", state, {"seed": 0, "optim": {"lr": 0.2}})
    assert framework_log.messages[0] == (
        "warning: resuming with a config that differs from the checkpoint's: optim.lr: 0.1 -> 0.2. Optimizer and "
        "scheduler states continue as saved; a schedule's max_iters follows the config")
    assert framework_log.records[0].levelname == "WARNING" and len(framework_log.messages) == 2


@pytest.mark.parametrize("error", [KeyError("optimizers"), ValueError("loaded state dict has a different number"),
                                   RuntimeError("Error(s) in loading state_dict for ModuleDict:\n\tsize mismatch")])
def test_a_checkpoint_that_does_not_fit_is_one_line_with_the_version_that_wrote_it(tmp_path, error):
    path = tmp_path / "iter_4.pth"
    reason = " ".join(str(error).split())
    with pytest.raises(CheckpointError, match=re.escape(
            f"{path} does not fit this config's task/optimizers (written by framework 0.2.0): {reason}") + "$"):
        resume_trainer(Trainer(error), path, {"meta": {"framework_version": "0.2.0"}}, {})
    with pytest.raises(CheckpointError, match=re.escape("(written by framework ?)")):
        resume_trainer(Trainer(error), path, {}, {})


def test_a_long_reason_is_cut_at_300_characters(tmp_path):
    error = RuntimeError("size mismatch " + "x" * 400)
    with pytest.raises(CheckpointError) as err:
        resume_trainer(Trainer(error), Path("iter_4.pth"), {"meta": {}}, {})
    assert str(err.value) == f"iter_4.pth does not fit this config's task/optimizers (written by framework ?): {str(error)[:300]}"


def test_other_errors_of_loading_are_not_hidden(tmp_path):
    with pytest.raises(TypeError, match="^a bug$"):
        resume_trainer(Trainer(TypeError("a bug")), tmp_path / "iter_4.pth", {}, {})


def test_a_checkpoint_without_a_saved_config_resumes_without_a_warning(tmp_path, framework_log):
    # meta without "config" (a checkpoint written by hand or by a tool): nothing to compare with
    resume_trainer(Trainer(), tmp_path / "iter_7.pth", {"meta": {}}, {})
    assert [r.levelname for r in framework_log.records] == ["INFO"]
