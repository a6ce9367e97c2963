"""LoggerHook averages each logged key over the steps that logged it."""

from types import SimpleNamespace

import pytest
import torch

from framework.engine.hooks import LoggerHook
from framework.engine.loggers import LoggerGroup, RunLogger


class Writer(RunLogger):
    def __init__(self):
        self.scalars = {}

    def log_scalars(self, scalars, step):
        self.scalars.update(scalars)


def test_a_key_logged_on_some_steps_only_is_averaged_over_those_steps():
    writer = Writer()
    trainer = SimpleNamespace(iter=0, max_iters=4, stop_signal=None, epoch=0, data_time=0.0, iter_time=0.0,
                              loggers=LoggerGroup([writer]),
                              ensure_finite=lambda: None, task=SimpleNamespace(diagnose=lambda values: []),
                              device=torch.device("cpu"),
                              optim=SimpleNamespace(lrs=lambda: {"generator": 1e-3, "discriminator": 1e-3},
                                                    skipped_steps=0, skip_nonfinite=False))
    hook = LoggerHook(interval=4, progress_bar=False)
    hook.before_train(trainer)
    for step in range(1, 5):  # D every step, G every second step (d_steps_per_g_step: 2)
        trainer.iter = step
        trainer.step_logs = {"loss_d": torch.tensor(float(step))}
        if step % 2 == 0:
            trainer.step_logs["loss_g"] = torch.tensor(10.0 * step)
        hook.after_iter(trainer)
    assert writer.scalars["train/loss_d"] == pytest.approx(2.5)
    assert writer.scalars["train/loss_g"] == pytest.approx(30.0)  # (20 + 40) / 2, not / 4
    assert writer.scalars["train/lr_generator"] == pytest.approx(1e-3)
