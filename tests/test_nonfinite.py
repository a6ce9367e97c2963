"""A loss that turns NaN stops the run (raise) or skips the step (skip); nothing is ever
written from diverged weights, in one process and when only rank 1 of 2 diverges."""

import json

import pytest
import torch

from framework.checkpoint import files as ckpt
from framework.engine.nonfinite import NonFiniteGuard
from framework.errors import NonFiniteError
from framework.optim.optimizers import build_optimizers
from support import REPO, TINY_UNET, call_tool, run_forked_ranks, run_forked_tool

CONFIG = REPO / "configs/segmentation/unet_shapes.yaml"
RUN = [*TINY_UNET, "data.train.num_workers=0", "train.max_iters=8", "train.ckpt_interval=2", "train.val_interval=2",
       "train.log_interval=4", "train.best_metric=mIoU", "train.keep_last=1", "custom_imports=[probes]"]


def nan_loss_at(iteration: int, rank=None, stay=False) -> str:
    rank = "null" if rank is None else rank
    return (f"task.loss={{type: NaNAtIteration, iteration: {iteration}, rank: {rank}, stay: {str(stay).lower()}, "
            "loss: {type: CrossEntropyLoss, ignore_index: 255}}")


def test_raise_stops_naming_the_iteration_and_keeps_what_was_saved(tmp_path):
    # The divergence at iteration 5 is noticed at iteration 6 (the next evaluation/checkpoint)
    # and nothing after iteration 4 is written: no iter_6.pth, no new best.pth, no metric record.
    result = run_forked_tool("train", "--config", CONFIG, "--work-dir", tmp_path, *RUN, nan_loss_at(5),
                             folder=tmp_path / "out")
    assert result.returncode == 2, result.stdout[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert "training diverged: loss not finite at iteration 5 (stopped at iteration 6" in lines[0]
    folder = tmp_path / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == ["best.pth", "iter_4.pth", "latest"]
    assert ckpt.load_checkpoint(folder / "best.pth")["meta"]["iter"] <= 4
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["iter"] for r in records] == [2, 4]
    state = ckpt.load_checkpoint(folder / "iter_4.pth")["task"]
    assert all(torch.isfinite(v).all() for v in state.values() if v.is_floating_point())


def test_skip_skips_counts_and_finishes(tmp_path):
    result = run_forked_tool("train", "--config", CONFIG, "--work-dir", tmp_path, *RUN, nan_loss_at(3),
                             "train.nan_policy=skip", folder=tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert "skipped_steps 1" in result.stdout
    state = ckpt.load_checkpoint(tmp_path / "checkpoints/iter_8.pth")
    assert state["optim"]["skipped_steps"] == 1
    assert all(torch.isfinite(v).all() for v in state["task"].values() if v.is_floating_point())


def test_skip_raises_after_too_many_consecutive_skips(tmp_path):
    result = run_forked_tool("train", "--config", CONFIG, "--work-dir", tmp_path, *RUN, nan_loss_at(3, stay=True),
                             "train.nan_policy=skip", "train.nan_max_skips=2", folder=tmp_path / "out")
    assert result.returncode == 2
    assert "not finite in 3 iterations in a row (train.nan_policy=skip allows 2" in result.stderr
    # iterations 3, 4 and 5 skipped: iter_4.pth holds iteration 2's (finite) weights; no iter_6.pth
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["best.pth", "iter_4.pth", "latest"]


@pytest.mark.parametrize("policy", ["raise", "skip"])
def test_nan_on_rank_1_only_is_one_decision_for_both_ranks(tmp_path, policy):
    result = run_forked_ranks(2, "train", "--config", CONFIG, "--work-dir", tmp_path, *RUN, nan_loss_at(3, rank=1),
                              f"train.nan_policy={policy}", "data.train.batch_size=2", cwd=REPO / "tests",
                              folder=tmp_path / "out", timeout=240)
    if policy == "raise":
        # rank 0's own loss stayed finite: the check is a collective, so it stops too, by itself
        # (not killed after the other's failure) and with the same error
        assert result.exit_codes == [2, 2], result.stderr[-3000:]
        rank0 = (tmp_path / "out" / "train.stderr.rank0").read_text()
        rank1 = (tmp_path / "out" / "train.stderr.rank1").read_text()
        assert "error: training diverged: a loss on another process not finite at iteration 3 (stopped at" in rank0
        assert "error: training diverged: loss not finite at iteration 3 (stopped at" in rank1, rank1[-2000:]
        assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["best.pth", "iter_2.pth", "latest"]
    else:
        assert result.returncode == 0, result.stderr[-3000:]
        state = ckpt.load_checkpoint(tmp_path / "checkpoints/iter_8.pth")
        assert state["optim"]["skipped_steps"] == 1  # rank 0 skipped rank 1's step with it


def test_test_tool_refuses_a_checkpoint_with_nonfinite_weights(tmp_path):
    folder = tmp_path / "checkpoints"
    result = run_forked_tool("train", "--config", CONFIG, "--work-dir", tmp_path, *RUN, "train.max_iters=2",
                             folder=tmp_path / "out")
    assert result.returncode == 0, result.stderr
    state = ckpt.load_checkpoint(folder / "iter_2.pth")
    key = next(k for k, v in state["task"].items() if v.is_floating_point())
    state["task"][key] = state["task"][key] * float("nan")
    ckpt.save_checkpoint(state, tmp_path / "nan.pth")
    result = call_tool("test", "--config", CONFIG, "--checkpoint", tmp_path / "nan.pth", "--work-dir", tmp_path / "t",
                       *TINY_UNET)
    assert result.returncode == 2
    assert f"nan.pth: the weights are not finite (NaN or inf in task.{key}, " in result.stderr


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_raise_policy_stops_at_an_infinite_loss_too(bad):
    """`raise` checks isfinite, not only isnan: an inf loss diverges as surely as a NaN."""
    guard = NonFiniteGuard("raise")
    guard.observe(1, {"loss": torch.tensor(0.5), "loss_aux": torch.tensor(0.1)})
    guard.observe(2, {"loss": torch.tensor(0.4), "loss_aux": torch.tensor(bad)})
    guard.observe(3, {"loss": torch.tensor(bad), "loss_aux": torch.tensor(0.1)})
    with pytest.raises(NonFiniteError, match=r"^training diverged: loss_aux not finite at iteration 2 "
                                             r"\(stopped at iteration 3;"):
        guard.check(3)


def test_raise_policy_passes_finite_losses():
    guard = NonFiniteGuard("raise")
    guard.observe(1, {"loss": torch.tensor(3.0e38), "loss_aux": 0.25})  # large but finite; a float term
    guard.check(1)


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Linear(3, 1)


@pytest.mark.parametrize("bad_micro_batch", [0, 1])
def test_skip_policy_with_accumulation_skips_a_step_whose_first_micro_batch_is_nan(bad_micro_batch):
    """train.accumulate: 2 and nan_policy: skip. A NaN in either micro-batch poisons the
    accumulated gradient, so the step is skipped whichever micro-batch it was in; the next
    step (both finite) applies exactly the mean of its two micro-batches' gradients."""
    task = Linear()
    optim = build_optimizers({"optim": {"type": "SGD", "lr": 0.5}}, task, max_iters=4, skip_nonfinite=True)
    before = [p.detach().clone() for p in task.parameters()]
    x = torch.ones(2, 3)
    for index in range(2):
        with optim.micro_step(index, 2):
            loss = task.net(x).sum()
            optim.update(loss * float("nan") if index == bad_micro_batch else loss)
    assert optim.end_iteration() is True and optim.skipped_steps == 1
    assert all(torch.equal(a, b) for a, b in zip(before, task.parameters()))

    for index in range(2):  # a finite step: mean of the two micro-batch gradients (each d(sum)/dw = 2x)
        with optim.micro_step(index, 2):
            optim.update(task.net(x * (index + 1)).sum())
    assert optim.end_iteration() is False and optim.skipped_steps == 1
    weight, bias = before
    torch.testing.assert_close(task.net.weight, weight - 0.5 * (2 * 1 + 2 * 2) / 2 * torch.ones(1, 3))
    torch.testing.assert_close(task.net.bias, bias - 0.5 * torch.tensor([2.0]))


def test_the_guard_checks_by_itself_after_max_pending_iterations():
    """A run that never logs, evaluates or saves still stops: a check every MAX_PENDING iterations."""
    guard = NonFiniteGuard()  # raise is the default policy
    guard.observe(1, {"loss": torch.tensor(float("nan")), "loss_aux": torch.tensor(1.0)})
    guard.observe(2, {"loss_gan": torch.tensor(float("inf")), "loss_l1": torch.tensor(float("nan"))})
    for iteration in range(3, NonFiniteGuard.MAX_PENDING):
        guard.observe(iteration, {"loss": torch.tensor(1.0)})  # 999 kept, none checked yet
    with pytest.raises(NonFiniteError, match=rf"^training diverged: loss not finite at iteration 1 \(stopped at "
                                             rf"iteration {NonFiniteGuard.MAX_PENDING}; checkpoints and best\.pth from "
                                             r"before it are kept\)\. Lower optim\.lr, "):
        guard.observe(NonFiniteGuard.MAX_PENDING, {"loss": torch.tensor(1.0)})
    with pytest.raises(NonFiniteError, match=r"at iteration 1 \(stopped at iteration 1000;"):
        guard.check(1200)  # the same error again, whatever comes later


def test_the_skip_policy_keeps_no_logs_for_the_guard():
    """Under skip, each step decides for itself; the guard keeps nothing and never raises."""
    guard = NonFiniteGuard("skip")
    guard.observe(1, {"loss": torch.tensor(float("inf"))})
    guard.check(1)
    assert guard._pending == []


def test_the_guard_names_every_non_finite_term_of_the_first_bad_iteration():
    guard = NonFiniteGuard()
    guard.observe(4, {"loss": torch.tensor(1.0), "loss_gan": torch.tensor(float("inf")),
                      "loss_l1": torch.tensor(float("nan"))})
    guard.observe(5, {"loss": torch.tensor(float("nan"))})
    with pytest.raises(NonFiniteError, match=r"^training diverged: loss_gan, loss_l1 not finite at iteration 4 "
                                             r"\(stopped at iteration 5; "):
        guard.check(5)
