"""tools/search.py on Optuna: trials as real tools/train.py runs whose objective is read from their
own metrics.jsonl, the best trial as a config that loads on its own, a second command joining the
study, the OptunaPruningHook (pruned below the median with its checkpoint, on one process and on
two where rank 0 decides), a killed search's trial retried from its checkpoint, and the mistakes
refused in one line before anything is written."""

import json
import os
from pathlib import Path

import pytest
from PIL import Image

from framework.comparison.search_space import as_override
from framework.config import load_config
from support import REPO, call_tool, run_forked_ranks

pytest.importorskip("optuna")

QUICKSTART = REPO / "configs/segmentation/unet_shapes.yaml"
TINY = ["device=cpu", "deterministic=true", "threads=1", "task.model.depth=2", "data.train.dataset.size=32",
        "data.train.dataset.num_samples=16", "data.train.batch_size=4", "data.train.num_workers=0",
        "data.val.dataset.size=32", "data.val.dataset.num_samples=8", "data.val.batch_size=8",
        "train.max_iters=20", "train.val_interval=10", "train.ckpt_interval=10", "train.log_interval=10",
        "train.vis_images=0", "loggers=[]"]
SPACE = "optim.lr: {log_uniform: [1.0e-4, 1.0e-2]}\ntask.model.base_channels: {choice: [4, 8]}\n"


def search(space, work_dir, trials="2", *extra):
    return call_tool("search", "--config", QUICKSTART, "--space", space, "--trials", trials,
                     "--work-dir", work_dir, *extra, *TINY)


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    folder = tmp_path_factory.mktemp("search")
    (folder / "space.yaml").write_text(SPACE)
    result = search(folder / "space.yaml", folder / "out")
    assert result.returncode == 0, result.stderr + result.stdout[-2000:]
    return folder, result


def best_of(run_dir):
    values = [json.loads(line)["mIoU"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
              if json.loads(line)["iter"] > 0]
    return max(values)


def trial_rows(table: Path) -> list[str]:
    return [line for line in table.read_text().splitlines()[2:] if line.startswith("|")]


def test_the_table_says_what_pruning_saved():
    optuna = pytest.importorskip("optuna")
    from datetime import datetime, timedelta

    from framework.comparison.search import trials_table

    study = optuna.create_study(direction="maximize")
    start = datetime(2026, 12, 2)
    for state, seconds, value in [("COMPLETE", 100, 0.9), ("COMPLETE", 140, 0.8), ("PRUNED", 30, None),
                                  ("PRUNED", 50, None)]:
        study.add_trial(optuna.trial.FrozenTrial(
            number=0, trial_id=0, state=getattr(optuna.trial.TrialState, state), value=value,
            datetime_start=start, datetime_complete=start + timedelta(seconds=seconds), params={"lr": 0.1},
            distributions={"lr": optuna.distributions.FloatDistribution(0.01, 1.0)}, user_attrs={}, system_attrs={},
            intermediate_values={10: 0.5} if value is None else {}))
    table = trials_table(study, "mIoU")
    assert "| 2 | pruned | 0.1 | - | 30 |" in table
    assert table.endswith("pruned trials: 2, each on average 0.33 of a finished trial's time (40 s against 120 s)\n")


def test_each_trial_is_a_run_and_its_objective_its_best_miou(searched):
    folder, result = searched
    rows = trial_rows(folder / "out/trials.md")
    assert len(rows) == 2
    for number, row in enumerate(rows):
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert cells[:2] == [str(number), "complete"]
        assert float(cells[-2]) == pytest.approx(best_of(folder / f"out/trial_{number}"), abs=5e-4)  # 4 digits
        assert int(cells[-1]) >= 0  # its seconds


def test_the_best_trial_is_a_config_of_its_own(searched):
    folder, result = searched
    objective = {n: best_of(folder / f"out/trial_{n}") for n in (0, 1)}
    best = max(objective, key=objective.get)
    cfg = load_config(str(folder / "out/best.yaml"), [])
    log = (folder / f"out/trial_{best}.log").read_text()
    assert as_override("optim.lr", cfg.optim.lr) in log  # the very value the best run trained with
    assert as_override("task.model.base_channels", cfg.task.model.base_channels) in log
    assert cfg.train.max_iters == 20 and cfg.device == "cpu"  # the command's overrides too
    for name in ("optimization_history.png", "param_importances.png"):
        assert Image.open(folder / "out" / name).size[0] > 100


def test_a_second_command_joins_the_study(searched):
    folder, _ = searched
    result = search(folder / "space.yaml", folder / "out", "1")
    assert result.returncode == 0, result.stderr
    assert len(trial_rows(folder / "out/trials.md")) == 3
    assert (folder / "out/trial_2/metrics.jsonl").is_file()


def test_another_space_on_the_same_study_is_refused_naming_both(searched):
    folder, _ = searched
    other = folder / "other.yaml"
    other.write_text("optim.lr: {uniform: [1.0e-4, 1.0e-2]}\n")
    journal = folder / "out/study.journal"
    before = journal.stat().st_size
    result = search(other, folder / "out", "1")
    assert result.returncode == 2
    line = result.stderr.strip()
    assert str(folder / "space.yaml") in line and str(other) in line and "use another --work-dir" in line
    assert journal.stat().st_size == before


@pytest.mark.parametrize("space, words", [
    ("optim.lrr: {uniform: [0, 1]}\n", "optim.lrr is not a key of the config"),
    ("optim.lr: {uniform: [0.1, 0.01]}\n", "optim.lr: uniform [0.1, 0.01]: low > high"),
    ("optim.lr: {log_uniform: [0, 0.01]}\n", "optim.lr: log_uniform [0, 0.01]: low must be > 0"),
    ("task.model.base_channels: {choice: []}\n", "task.model.base_channels: choice needs a non-empty list"),
    ("optim.lr: {normal: [0, 1]}\n", "unknown distribution 'normal'"),
], ids=["key", "low>high", "log<=0", "empty", "kind"])
def test_a_bad_space_is_one_line_and_nothing_is_written(tmp_path, space, words):
    (tmp_path / "space.yaml").write_text(space)
    result = search(tmp_path / "space.yaml", tmp_path / "out")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and words in result.stderr
    assert not (tmp_path / "out").exists()


def test_zero_trials_are_refused(tmp_path):
    (tmp_path / "space.yaml").write_text(SPACE)
    result = search(tmp_path / "space.yaml", tmp_path / "out", "0")
    assert result.returncode == 2 and "--trials" in result.stderr
    assert not os.path.exists(tmp_path / "out")


def study_after_one_trial(tmp_path, earlier: float):
    """A study with one finished trial whose mIoU was `earlier` at iterations 10 and 20, and the
    hook of the next trial (its run's mIoU lies strictly between 0 and 1)."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    journal = tmp_path / "study.journal"
    study = optuna.create_study(study_name="search", storage=JournalStorage(JournalFileBackend(str(journal))),
                                direction="maximize")
    finished = study.ask()
    for step in (10, 20):
        finished.report(earlier, step)
    study.tell(finished, earlier)
    trial = study.ask()
    hook = {"type": "OptunaPruningHook", "storage": str(journal), "trial_id": trial._trial_id, "monitor": "mIoU",
            "startup_trials": 1}
    return study, "hooks=" + json.dumps([hook])


@pytest.mark.parametrize("earlier, pruned", [(1.0, True), (0.0, False)], ids=["below-median", "above-median"])
def test_the_pruning_hook_stops_a_trial_below_the_median_with_its_checkpoint(tmp_path, earlier, pruned):
    """Pruned at its first evaluation below the median, run to the end above it."""
    study, hooks = study_after_one_trial(tmp_path, earlier)
    result = call_tool("train", "--config", QUICKSTART, "--work-dir", tmp_path / "run", *TINY, hooks)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    reported = study.trials[1].intermediate_values
    checkpoints = tmp_path / "run/checkpoints"
    if pruned:
        assert records[-1]["pruned"] == {"monitor": "mIoU", "iter": 10, "value": records[0]["mIoU"]}
        assert reported == {10: records[0]["mIoU"]}
        assert (checkpoints / "iter_10.pth").is_file() and not (checkpoints / "iter_20.pth").exists()
    else:
        assert [r["iter"] for r in records] == [10, 20] and "pruned" not in records[-1]
        assert reported == {10: records[0]["mIoU"], 20: records[1]["mIoU"]}


def test_under_two_processes_rank_0_decides_and_both_stop_together(tmp_path):
    """Rank 0 alone reports (one intermediate value, not two) and asks Optuna; rank 1 follows the
    decision and leaves the loop at the same iteration: both exit 0, none waits on a collective."""
    study, hooks = study_after_one_trial(tmp_path, 1.0)
    result = run_forked_ranks(2, "train", "--config", QUICKSTART, "--work-dir", tmp_path / "run", *TINY, hooks,
                              folder=tmp_path / "logs", timeout=240)
    assert result.exit_codes == [0, 0], result.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert records[-1]["pruned"]["iter"] == 10 and [r["iter"] for r in records] == [10, 10]
    assert study.trials[1].intermediate_values == {10: records[0]["mIoU"]}
    assert (tmp_path / "run/checkpoints/iter_10.pth").is_file()


def test_a_search_killed_mid_trial_has_the_trial_retried_from_its_checkpoint(tmp_path):
    """SIGTERM ends the search process at once; its run gets SIGTERM from the kernel and saves. The
    next command finds the trial still running in the journal with its run gone, marks it failed
    and runs its values again, resuming the run (`== resume` in its log) to the end."""
    import signal
    import subprocess
    import sys
    import time

    (tmp_path / "space.yaml").write_text(SPACE)
    command = [sys.executable, str(REPO / "tools/search.py"), "--config", str(QUICKSTART), "--space",
               str(tmp_path / "space.yaml"), "--trials", "1", "--work-dir", str(tmp_path / "out"), *TINY,
               "train.max_iters=50"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 240
    while not (tmp_path / "out/trial_0/checkpoints/iter_10.pth").exists():
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()[0] if first.poll() is not None else ""
        time.sleep(0.1)
    first.send_signal(signal.SIGTERM)
    first.communicate(timeout=60)
    while (tmp_path / "out/trial_0/.lock").exists():  # the run saves and releases its folder
        assert time.monotonic() < deadline
        time.sleep(0.1)
    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "trial 0: its run stopped before the end (preempted or killed); retried from its checkpoint" in second.stdout
    log = (tmp_path / "out/trial_0.log").read_text()
    assert log.count("\n== start:") == 2 and "--resume" in log.rsplit("\n== start:", 1)[1].splitlines()[0]
    records = [json.loads(line) for line in (tmp_path / "out/trial_0/metrics.jsonl").read_text().splitlines()]
    assert records[-1]["iter"] == 50
    rows = [row.split("|")[2].strip() for row in trial_rows(tmp_path / "out/trials.md")]
    assert rows == ["fail", "complete"]
