"""EarlyStoppingHook: the rule on hand-written sequences, and real 2-process runs that stop at
the predicted iteration on both ranks, also after a crash and an automatic resume."""

import json
import math
import os
import shutil
import subprocess

import pytest
import torch

from framework.engine.hooks.early_stopping import StoppingRule
from probes import read_losses
from support import REPO, call_tool, run_forked_ranks, torchrun_command


def stops_at(rule: StoppingRule, values: list[float]) -> int | None:
    """The 1-based evaluation at which `rule` says stop, or None."""
    for i, value in enumerate(values, start=1):
        if rule.update(value) is not None:
            return i
    return None


@pytest.mark.parametrize("rule, kwargs, values, expected", [
    # greater, patience 2: 0.5 best; 0.6 better; 0.6 equal (1 wait); 0.55 (2 waits): stop at 4
    ("greater", dict(patience=2), [0.5, 0.6, 0.6, 0.55, 0.9], 4),
    # min_delta 0.05: 0.54 is not better than 0.5 + 0.05, 0.56 is, then 0.6 is not: waits 1, 0, 1, 2
    ("greater", dict(patience=2, min_delta=0.05), [0.5, 0.54, 0.56, 0.6, 0.6], 5),
    # less: a loss falling then rising; patience 3
    ("less", dict(patience=3), [1.0, 0.8, 0.85, 0.7, 0.75, 0.71, 0.72], 7),
    ("less", dict(patience=1, min_delta=0.1), [1.0, 0.95], 2),
    ("less", dict(patience=2), [0.5, 0.5, 0.5], 3),  # an equal value is no improvement
    # stopping_threshold is reached (equal counts) before patience runs out
    ("greater", dict(patience=10, stopping_threshold=0.8), [0.5, 0.7, 0.8, 0.9], 3),
    ("less", dict(patience=10, stopping_threshold=0.1), [0.5, 0.2, 0.11, 0.05], 4),
    # a NaN stops at once with check_finite; without it, a NaN is no improvement
    ("greater", dict(patience=5), [0.5, math.nan, 0.6], 2),
    ("greater", dict(patience=2, check_finite=False), [0.5, math.nan, math.nan, 0.9], 3),
    ("greater", dict(patience=2, check_finite=False), [math.nan, 0.5, 0.4, 0.4], 4),
    ("greater", dict(patience=3), [0.1, 0.2, 0.3, 0.4], None),
])
def test_rule_stops_where_the_hand_computation_says(rule, kwargs, values, expected):
    assert stops_at(StoppingRule(rule, **kwargs), values) == expected


def test_rule_keeps_the_best_and_count():
    rule = StoppingRule("greater", patience=3)
    for value in (0.5, 0.7, 0.6, 0.65):
        rule.update(value)
    assert (rule.best, rule.wait) == (0.7, 2)


@pytest.mark.parametrize("kwargs, message", [
    (dict(rule="bigger"), "rule must be one of greater, less, got 'bigger'"),
    (dict(rule="greater", patience=0), "patience must be an integer >= 1, got 0"),
    (dict(rule="greater", min_delta=-0.1), "min_delta must be a number >= 0, got -0.1"),
    (dict(rule="greater", stopping_threshold="0.9"), "stopping_threshold must be a number or null, got '0.9'"),
])
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        StoppingRule(**kwargs)


CONFIG = REPO / "configs/segmentation/unet_shapes.yaml"
# A tiny UNet on 2 processes, evaluated every 2 iterations, a checkpoint every 4.
RUN = ["device=cpu", "seed=3", "train.max_iters=20", "train.val_interval=2", "train.ckpt_interval=4",
       "train.log_interval=1", "task.model.base_channels=8", "task.model.depth=2", "task.model.norm=none",
       "data.train.dataset.num_samples=32", "data.train.dataset.size=32", "data.train.batch_size=2",
       "data.train.num_workers=0", "data.val.dataset.num_samples=4", "data.val.dataset.size=32",
       "data.val.batch_size=2", "custom_imports=[probes]", "dist.timeout=60",
       "threads=1"]  # both launches (forked ranks, torchrun) at one thread: the same float sums under any pytest -n
# No aAcc can improve by more than 1.0: the evaluation at 2 sets the best, those at 4 and 6
# count 1 and 2 without improvement, and patience 2 stops the run at iteration 6 (of 20).
EARLY_STOP = "{type: EarlyStoppingHook, monitor: aAcc, rule: greater, patience: 2, min_delta: 1.0}"
PREDICTED_STOP = 6


def train_two_processes(work_dir, *hooks, restarts=None):
    """Two ranks forked from the fork server, or, given `restarts`, under torchrun --max-restarts."""
    hook_list = ", ".join([f"{{type: LossRecorderHook, path: '{work_dir / 'losses.txt'}'}}", EARLY_STOP, *hooks])
    if restarts is None:
        return run_forked_ranks(2, "train", "--config", CONFIG, "--work-dir", work_dir, *RUN, f"hooks=[{hook_list}]",
                                cwd=REPO / "tests", folder=work_dir.parent / f"{work_dir.name}_out")
    command = torchrun_command(2, REPO / "tools/train.py", "--config", CONFIG, "--work-dir", work_dir, *RUN,
                               f"hooks=[{hook_list}]",
                               launcher=("--standalone", "--nproc_per_node", 2, "--max-restarts", restarts))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, cwd=REPO / "tests", env=env, capture_output=True, text=True, timeout=300)


def assert_stopped_at(work_dir, result, iteration):
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"early stopping at iteration {iteration}/20: aAcc: no improvement" in result.stdout
    for losses in ("losses.txt", "losses.txt.rank1"):  # both ranks ended at that iteration
        assert read_losses(work_dir / losses)[-1][0] == iteration, losses
    assert (work_dir / "checkpoints/latest").read_text() == f"iter_{iteration}.pth"
    records = [json.loads(line) for line in (work_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["iter"] for r in records] == [2, 4, 6, 6]
    stop = records[-1]
    assert stop["stopped_early"]["monitor"] == "aAcc" and stop["stopped_early"]["best"] == records[0]["aAcc"]
    assert "in the last 2 evaluations (patience 2)" in stop["stopped_early"]["reason"]


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("early")
    return work_dir, train_two_processes(work_dir)


def test_two_processes_stop_at_the_predicted_iteration(stopped_run):
    work_dir, result = stopped_run
    assert_stopped_at(work_dir, result, PREDICTED_STOP)
    state = torch.load(work_dir / f"checkpoints/iter_{PREDICTED_STOP}.pth", weights_only=True)
    assert state["hooks"]["EarlyStoppingHook"]["wait"] == 2


def test_a_crash_and_automatic_resume_stop_at_the_same_iteration(stopped_run, tmp_path):
    """Rank 1 dies at iteration 5; torchrun restarts the group, which resumes from iteration 4
    with one evaluation counted without improvement, and stops at 6 as the uninterrupted run
    did (with the count lost it would stop at 10)."""
    reference_dir, _ = stopped_run
    result = train_two_processes(tmp_path, "{type: CrashOnFirstAttemptHook, iteration: 5, rank: 1}", restarts=1)
    assert "iter_4.pth at iteration 4" in result.stdout
    assert_stopped_at(tmp_path, result, PREDICTED_STOP)
    assert (tmp_path / "metrics.jsonl").read_text() == (reference_dir / "metrics.jsonl").read_text()
    for losses in ("losses.txt", "losses.txt.rank1"):
        expected = dict(read_losses(reference_dir / losses))
        assert all(value == expected[it] for it, value in read_losses(tmp_path / losses)), losses


def test_resuming_a_run_that_stopped_early_trains_no_further(stopped_run, tmp_path, monkeypatch):
    work_dir = tmp_path / "run"
    shutil.copytree(stopped_run[0], work_dir)
    monkeypatch.chdir(REPO / "tests")  # custom_imports=[probes]
    result = call_tool("train", "--config", CONFIG, "--work-dir", work_dir, *RUN, "--resume",
                       f"hooks=[{EARLY_STOP}]")
    assert result.returncode == 0, result.stderr
    assert f"this run stopped at iteration {PREDICTED_STOP}" in result.stdout + result.stderr
    assert sorted(p.name for p in (work_dir / "checkpoints").glob("iter_*.pth")) == ["iter_4.pth", "iter_6.pth"]


@pytest.mark.parametrize("overrides, message", [
    ([f"hooks=[{EARLY_STOP}]", "train.val_interval=0"],
     "hooks: EarlyStoppingHook needs evaluations during training: set data.val and train.val_interval > 0"),
    (["hooks=[{type: EarlyStoppingHook, monitor: aAcc, rule: bigger}]"],
     "hooks[0] (EarlyStoppingHook): rule must be one of greater, less, got 'bigger'"),
    (["hooks=[{type: EarlyStoppingHook, monitor: score}]"],
     "hooks[0] (EarlyStoppingHook): rule: missing, and the name 'score' does not say whether a greater or a "
     "smaller value is better: set rule: greater or rule: less"),
])
def test_mistakes_are_one_line_before_training(tmp_path, overrides, message):
    result = call_tool("train", "--config", CONFIG, "--work-dir", tmp_path, *[o for o in RUN if "probes" not in o],
                       *overrides)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert not (tmp_path / "checkpoints").exists()


def test_one_process_stops_at_the_predicted_iteration_and_records_why(tmp_path, monkeypatch):
    """In this process (the hook's evaluation-time code, which the two-process runs cover in
    their own processes): the untrained network (val_at_start) is no candidate, the stop is
    recorded in metrics.jsonl and the checkpoint, and training ends there."""
    monkeypatch.chdir(REPO / "tests")  # custom_imports=[probes]
    work_dir = tmp_path / "run"
    result = call_tool("train", "--config", CONFIG, "--work-dir", work_dir, *RUN, "train.val_at_start=true",
                       "optim.lr=0.02", "optim.scheduler.warmup_iters=1",  # values that move (by less than 1.0)
                       f"hooks=[{{type: LossRecorderHook, path: '{tmp_path / 'losses.txt'}'}}, {EARLY_STOP}]")
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in (work_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["iter"] for r in records] == [0, 2, 4, 6, 6]  # iteration 0 evaluated, not counted
    assert records[3]["aAcc"] != records[1]["aAcc"]
    stop = records[-1]["stopped_early"]
    assert stop == {"monitor": "aAcc", "value": records[3]["aAcc"], "best": records[1]["aAcc"],
                    "reason": f"aAcc: no improvement by more than min_delta 1 over the best {records[1]['aAcc']:.6g} "
                              "in the last 2 evaluations (patience 2)"}
    assert records[-1]["epoch"] == records[3]["epoch"]
    assert f"early stopping at iteration 6/20: {stop['reason']}" in result.stdout + result.stderr
    assert read_losses(tmp_path / "losses.txt")[-1][0] == PREDICTED_STOP
    state = torch.load(work_dir / f"checkpoints/iter_{PREDICTED_STOP}.pth", weights_only=True)
    assert state["hooks"]["EarlyStoppingHook"] == {"best": records[1]["aAcc"], "wait": 2,
                                                   "stopped": {"iter": 6, "reason": stop["reason"]}}


def test_a_run_that_ends_as_patience_runs_out_records_no_early_stop(tmp_path, monkeypatch):
    """Patience runs out at iteration 6 of 6: the run ended by itself; nothing stopped it."""
    monkeypatch.chdir(REPO / "tests")
    work_dir = tmp_path / "run"
    result = call_tool("train", "--config", CONFIG, "--work-dir", work_dir, *RUN, "train.max_iters=6",
                       f"hooks=[{EARLY_STOP}]")
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in (work_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["iter"] for r in records] == [2, 4, 6] and "early stopping" not in result.stdout + result.stderr
    state = torch.load(work_dir / "checkpoints/iter_6.pth", weights_only=True)
    assert state["hooks"]["EarlyStoppingHook"]["stopped"] == {}


SCORES_METRIC = """
from framework.metrics.base import Metric
from framework.registry import METRICS

@METRICS.register()
class ScriptedScore(Metric):  # says no names in advance; returns 0.5, then NaN
    calls = 0

    def update(self, outputs):
        pass

    def compute(self):
        ScriptedScore.calls += 1
        return {"score": 0.5 if ScriptedScore.calls == 1 else float("nan")}
"""


def test_a_value_that_turns_nan_stops_the_run_and_is_recorded_as_text(tmp_path, monkeypatch):
    (tmp_path / "scripted_score.py").write_text(SCORES_METRIC)
    monkeypatch.chdir(REPO / "tests")
    work_dir = tmp_path / "run"
    common = [*RUN, f"custom_imports=[probes, '{tmp_path / 'scripted_score.py'}']", "metrics=[{type: ScriptedScore}]",
              "train.best_metric=null"]
    result = call_tool("train", "--config", CONFIG, "--work-dir", work_dir, *common,
                       "hooks=[{type: EarlyStoppingHook, monitor: score, rule: greater, patience: 5}]")
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in (work_dir / "metrics.jsonl").read_text().splitlines()]
    assert records[-1] == {"iter": 4, "epoch": records[-1]["epoch"], "stopped_early": {
        "monitor": "score", "value": "nan", "best": 0.5,
        "reason": "score: the monitored value is nan (not finite); best so far 0.5"}}
    # a metric that cannot name its values in advance: a wrong monitor is found at its first evaluation
    result = call_tool("train", "--config", CONFIG, "--work-dir", tmp_path / "other", *common,
                       "hooks=[{type: EarlyStoppingHook, monitor: mIoU, rule: greater}]")
    assert result.returncode == 2
    assert ("hooks: EarlyStoppingHook: monitor 'mIoU' is not a metric of this run (have: score)"
            in result.stderr), result.stderr
