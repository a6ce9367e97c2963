"""The training loop in-process: hook order, after_train when the step raises, hook states in
checkpoints (and checkpoints of the previous format), logs averaged over micro-batches."""

import pytest
import torch

from framework.config import load_config
from framework.engine.build import build_trainer
from framework.engine.hooks import CheckpointHook, Hook
from framework.tasks.base import average_logs
from support import REPO, TINY_UNET

CONFIG = REPO / "configs/segmentation/unet_shapes.yaml"
RUN = [*TINY_UNET, "data.train.num_workers=0", "train.max_iters=4", "train.val_interval=2", "train.ckpt_interval=0",
       "train.log_interval=2", "train.best_metric=mIoU", "train.progress_bar=false"]


class Recorder(Hook):
    def __init__(self, priority, calls):
        self.priority, self.calls = priority, calls

    def __getattribute__(self, name):
        if name in ("before_train", "before_iter", "after_iter", "after_eval", "after_train"):
            calls, priority = object.__getattribute__(self, "calls"), object.__getattribute__(self, "priority")
            return lambda trainer, *args: calls.append((name, trainer.iter, priority))
        return object.__getattribute__(self, name)


def trainer_for(work_dir, *overrides):
    cfg = load_config(CONFIG, [*RUN, *overrides])
    return build_trainer(cfg, str(work_dir))


def test_hooks_run_in_priority_order_at_each_stage(tmp_path):
    trainer = trainer_for(tmp_path)
    calls = []
    trainer.hooks = sorted(trainer.hooks + [Recorder(60, calls), Recorder(5, calls)], key=lambda h: h.priority)
    trainer.fit()
    stages = [(stage, it) for stage, it, _ in calls]
    assert stages[:2] == [("before_train", 0)] * 2
    assert stages[-2:] == [("after_train", 4)] * 2
    # the evaluation at iteration 2 (EvalHook, 30) reaches every hook between 5's and 60's after_iter
    at_2 = [(stage, p) for stage, it, p in calls if it == 2 and stage in ("after_iter", "after_eval")]
    assert at_2 == [("after_iter", 5), ("after_eval", 5), ("after_eval", 60), ("after_iter", 60)]
    assert [p for stage, it, p in calls if stage == "before_iter" and it == 0] == [5, 60]


@pytest.mark.parametrize("overrides, expected", [
    (["deterministic=false"], True),  # the default: cuDNN picks the fastest algorithm per shape (CUDA only)
    (["deterministic=false", "cudnn_benchmark=false"], False),
    (["deterministic=true"], False),  # its timing-based choice would differ between runs
])
def test_cudnn_benchmark_is_on_unless_turned_off_or_deterministic(tmp_path, monkeypatch, overrides, expected):
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", not expected)  # restored after the test
    trainer_for(tmp_path, *overrides)
    assert torch.backends.cudnn.benchmark is expected


def test_a_hook_added_between_two_fits_is_called_in_the_second(tmp_path):
    trainer = trainer_for(tmp_path, "train.max_iters=2", "train.val_interval=0")
    trainer.fit()
    calls = []
    trainer.hooks.append(Recorder(60, calls))
    trainer.max_iters = 4
    trainer.fit()
    assert [it for stage, it, _ in calls if stage == "after_iter"] == [3, 4]


def test_after_train_runs_when_the_step_raises(tmp_path):
    trainer = trainer_for(tmp_path)
    calls = []
    trainer.hooks.append(Recorder(60, calls))
    original = trainer.task.train_iteration

    def failing(batches, optim):
        if trainer.iter == 2:
            raise RuntimeError("boom at iteration 3")
        return original(batches, optim)

    trainer.task.train_iteration = failing
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit()
    assert calls[-1] == ("after_train", 2, 60)
    assert isinstance(trainer.error, RuntimeError)
    assert (tmp_path / "tensorboard").is_dir()  # the writer was flushed and the events are on disk


def test_the_best_record_lives_in_the_checkpoint_hook_and_resumes(tmp_path):
    trainer = trainer_for(tmp_path)
    trainer.fit()
    hook = next(h for h in trainer.hooks if isinstance(h, CheckpointHook))
    assert hook.best["metric"] == "mIoU" and hook.best["iter"] in (2, 4)
    state = trainer.state_dict()
    assert state["hooks"]["CheckpointHook"] == {"best": hook.best}
    assert "best" not in state["meta"]

    resumed = trainer_for(tmp_path / "resumed")
    resumed.load_state_dict(state)
    assert next(h for h in resumed.hooks if isinstance(h, CheckpointHook)).best == hook.best

    # a checkpoint of format 1 (framework 0.1) kept the record in meta and had no hook states
    old = {**state, "meta": {**state["meta"], "best": {"metric": "mIoU", "value": 0.5, "iter": 2}}}
    del old["hooks"], old["meta"]["format"]
    again = trainer_for(tmp_path / "old")
    again.load_state_dict(old)
    assert next(h for h in again.hooks if isinstance(h, CheckpointHook)).best["value"] == 0.5


def test_logs_are_averaged_over_the_micro_batches_that_logged_them():
    logs = average_logs([{"loss": torch.tensor(1.0), "loss_g": torch.tensor(4.0)}, {"loss": torch.tensor(3.0)}])
    assert logs["loss"].item() == 2.0 and logs["loss_g"].item() == 4.0
