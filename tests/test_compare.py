"""tools/compare.py: configs x seeds as real training processes, the report against the runs'
own metrics.jsonl, resuming after a stop, a failing config among good ones, and the mistakes
refused before anything runs."""

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PIL import Image

from framework.comparison.plan import available_cores, make_plan, parse_metric, split_cores
from framework.comparison.plot import CONFIG_COLOURS
from framework.comparison.runner import outcome_of, run_pairs
from framework.comparison.summary import final_and_best, paired
from framework.errors import ConfigError
from support import REPO, call_tool

QUICKSTART = REPO / "configs/segmentation/unet_shapes.yaml"
# Long enough (200 iterations after the first checkpoint at 10) that a stop lands mid-run on a quiet,
# fast machine too; a few seconds of training each.
TINY = ["device=cpu", "deterministic=true", "task.model.base_channels=8", "task.model.depth=2",
        "data.train.dataset.size=32", "data.train.dataset.num_samples=32", "data.train.batch_size=4",
        "data.train.num_workers=0", "data.val.dataset.size=32", "data.val.dataset.num_samples=8",
        "data.val.batch_size=8", "train.max_iters=200", "train.val_interval=50", "train.ckpt_interval=10",
        "train.log_interval=50", "train.vis_images=0", "loggers=[]"]
SEEDS = ["0", "1"]
JOBS = str(min(2, len(available_cores())))


def compare_command(configs, work_dir, *extra):
    return ["--configs", *map(str, configs), "--seeds", *SEEDS, "--jobs", JOBS, "--work-dir", str(work_dir),
            *extra, *TINY]


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    """The Quickstart, and the same at a third of the learning rate."""
    folder = tmp_path_factory.mktemp("configs")
    (folder / "fast.yaml").write_text(f"_base_: [{QUICKSTART}]\n")
    (folder / "slow.yaml").write_text(f"_base_: [{QUICKSTART}]\noptim: {{lr: 1.0e-3}}\n")
    return [folder / "fast.yaml", folder / "slow.yaml"]


@pytest.fixture(scope="module")
def compared(configs, tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("compare") / "out"
    result = call_tool("compare", *compare_command(configs, work_dir))  # in this process: no second start-up
    assert result.returncode == 0, result.stderr + result.stdout[-3000:]
    return work_dir, result


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_the_report_holds_what_each_run_wrote(compared):
    work_dir, result = compared
    summary = json.loads((work_dir / "summary.json").read_text())
    assert summary["threads_per_run"] == len(available_cores()) // int(JOBS)
    for config in summary["results"]:
        for run in config["runs"]:
            written = [(r["iter"], r["mIoU"]) for r in records(work_dir / config["name"] / f"seed{run['seed']}")]
            assert [i for i, _ in written] == [50, 100, 150, 200]
            best_iter, best = max(written, key=lambda point: point[1])
            assert run["mIoU"] == {"final": written[-1][1], "final_iter": 200, "best": best, "best_iter": best_iter}
        finals = [run["mIoU"]["final"] for run in config["runs"]]
        assert config["metrics"]["mIoU"]["final"] == {"n": 2, "mean": (finals[0] + finals[1]) / 2,
                                                      "sd": pytest.approx(abs(finals[0] - finals[1]) / math.sqrt(2)),
                                                      "min": min(finals), "max": max(finals)}
    fast, slow = ({run["seed"]: run["mIoU"]["final"] for run in c["runs"]} for c in summary["results"])
    differences = [slow[0] - fast[0], slow[1] - fast[1]]  # seed by seed
    versus = summary["results"][1]["metrics"]["mIoU"]["paired_vs_first"]["final"]
    assert versus["mean"] == pytest.approx(sum(differences) / 2)
    assert versus["sd"] == pytest.approx(abs(differences[0] - differences[1]) / math.sqrt(2))
    assert (versus["min"], versus["max"]) == (min(differences), max(differences))
    assert (versus["higher"], versus["lower"]) == (sum(d > 0 for d in differences), sum(d < 0 for d in differences))
    assert "paired_vs_first" not in summary["results"][0]["metrics"]["mIoU"]
    markdown = (work_dir / "summary.md").read_text()
    assert f"| {versus['higher']} / {versus['lower']} of 2 |" in markdown and markdown in result.stdout


def test_the_plot_draws_each_config_in_its_colour(compared):
    work_dir, _ = compared
    with Image.open(work_dir / "curves_mIoU.png") as image:
        assert image.format == "PNG" and image.size == (700, 450)
        pixels = list(image.convert("RGB").tobytes())
        pixels = list(zip(pixels[0::3], pixels[1::3], pixels[2::3]))
    for colour in CONFIG_COLOURS[:2]:  # the thick mean lines: many pixels of exactly the colour
        rgb = tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
        assert pixels.count(rgb) > 200, colour
    assert pixels.count(tuple(int(CONFIG_COLOURS[2][i:i + 2], 16) for i in (1, 3, 5))) == 0  # no third config


def test_a_rerun_skips_finished_runs(compared, configs):
    work_dir, _ = compared
    before = (work_dir / "summary.json").read_bytes()
    result = call_tool("compare", *compare_command(configs, work_dir))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("finished earlier, not run again") == 4
    assert (work_dir / "summary.json").read_bytes() == before


def test_overrides_after_metric_are_overrides_not_metric_names(compared, configs):
    """`--metric mIoU device=cpu ...`: --metric takes what follows it, as --seeds does; the overrides
    go back to the runs, so this is the fixture's command (the same runs, found finished)."""
    work_dir, _ = compared
    before = (work_dir / "summary.json").read_bytes()
    result = call_tool("compare", *compare_command(configs, work_dir, "--metric", "mIoU"))  # TINY after --metric
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("finished earlier, not run again") == 4
    assert (work_dir / "summary.json").read_bytes() == before


def test_a_stopped_comparison_resumes_and_gives_the_same_json(compared, configs, tmp_path):
    reference, _ = compared
    work_dir = tmp_path / "out"
    for name in ("fast", "slow"):  # seed 1 finished already (fewer runs to wait for); seed 0 is stopped
        (work_dir / name).mkdir(parents=True)
        for path in (reference / name).glob("seed1*"):
            (shutil.copytree if path.is_dir() else shutil.copy)(path, work_dir / name / path.name)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(REPO / "tools/compare.py"), *compare_command(configs, work_dir)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first_checkpoint = work_dir / "fast/seed0/checkpoints/iter_10.pth"
    deadline = time.monotonic() + 120
    while not first_checkpoint.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, err + out[-2000:]
    assert "stopped: rerun the same command to resume" in err
    assert not (work_dir / "fast/seed0.json").exists() or json.loads((work_dir / "fast/seed0.json").read_text())["returncode"] != 0

    result = call_tool("compare", *compare_command(configs, work_dir))
    assert result.returncode == 0, result.stderr + result.stdout[-3000:]
    assert "fast seed 0: resumed" in result.stdout and "fast seed 1: finished earlier" in result.stdout
    log = (work_dir / "fast/seed0.log").read_text()
    assert "== resume:" in log and "resumed from" in log
    assert (work_dir / "summary.json").read_bytes() == (reference / "summary.json").read_bytes()


def test_a_failing_config_is_reported_and_the_others_finish(compared, configs, tmp_path):
    broken = tmp_path / "broken.yaml"  # valid as a config; its run fails when it looks for the weights
    broken.write_text(f"_base_: [{QUICKSTART}]\nload_from: {tmp_path / 'missing.pth'}\n")
    work_dir = tmp_path / "out"
    shutil.copytree(compared[0] / "fast", work_dir / "fast")  # finished runs: only the broken ones start
    result = call_tool("compare", *compare_command([configs[0], broken], work_dir))
    assert result.returncode == 1, result.stderr + result.stdout[-3000:]
    summary = json.loads((work_dir / "summary.json").read_text())
    good, bad = summary["results"]
    assert [run["status"] for run in good["runs"] + bad["runs"]] == ["finished", "finished", "failed", "failed"]
    assert (good["metrics"]["mIoU"]["final"]["n"], bad["metrics"]["mIoU"]["final"]["n"]) == (2, 0)
    assert bad["runs"][1]["error"] == f"checkpoint not found: {tmp_path / 'missing.pth'}"
    assert f"- broken seed 1: failed: checkpoint not found: {tmp_path / 'missing.pth'}" in result.stdout


TROUBLESHOOTING = (REPO / "docs/troubleshooting.md").read_text()


@pytest.mark.parametrize("arguments, line, documented", [
    (["--metric", "miou"], "error: --metric: 'miou' is not a metric of {q} (have: mIoU, mAcc, aAcc; per class e.g. IoU.0); "
                           "did you mean 'mIoU'?", True),
    (["--metric", "IoU.circle", "Dice.circle"], "error: --metric: 'Dice.circle' is not a metric of {q} (have: mIoU, "
                                                "mAcc, aAcc; per class e.g. IoU.0)", False),
    (["--seeds", "0", "1", "0"], "error: --seeds: 0 given twice; each seed is one run per config", True),
    (["--seeds", "0", "--seeds", "1"], "error: --seeds given twice; list every value after one --seeds", True),
    (["--seeds", "-1"], "error: --seeds: expected an integer >= 0 and <= 9223372036854775807, got '-1'", False),
    (["--configs", "missing.yaml"], "error: --configs: config file not found: missing.yaml", True),
    (["--configs", "{q}", "{q}"], "error: --configs: {q} given twice; each config needs a name of its own (its file name)", True),
    (["--jobs", "0"], "error: --jobs: expected an integer >= 1, got 0", False),
    (["seed=4"], "error: override 'seed=4': seed is set for each run by --seeds; remove the override", True),
    (["train.max_iter=3"], "error: override 'train.max_iter': no key 'train.max_iter' in the config; "
                           "did you mean 'max_iters', 'val_interval'? (use +train.max_iter=... to add a new key)", True),
])
def test_a_mistake_is_one_line_before_any_run(tmp_path, arguments, line, documented):
    arguments = [a.replace("{q}", str(QUICKSTART)) for a in arguments]
    defaults = {"--configs": [str(QUICKSTART)], "--seeds": ["0"]}
    for option, values in defaults.items():
        if option not in arguments:
            arguments = [option, *values, *arguments]
    result = call_tool("compare", *arguments, "--work-dir", tmp_path / "out", *TINY)  # tiny, should one run
    assert (result.returncode, result.stderr) == (2, line.replace("{q}", str(QUICKSTART)) + "\n")
    assert not (tmp_path / "out").exists()
    assert not documented or f"`{line.replace('{q}', 'cfg.yaml')}`" in TROUBLESHOOTING


def test_without_metric_the_best_metric_is_compared_and_without_either_refused(tmp_path):
    plan = make_plan([str(QUICKSTART)], [0], ["device=cpu", "train.best_mode=min"], None, jobs=1, work_dir=tmp_path)
    assert plan.metrics == {"mIoU": "min"}  # best_mode decides
    with pytest.raises(ConfigError) as refused:
        make_plan([str(QUICKSTART)], [0], ["train.best_metric=null"], None, jobs=1, work_dir=tmp_path)
    assert f"`error: {refused.value}`" in TROUBLESHOOTING
    plan = make_plan([str(QUICKSTART)], [0], ["train.best_metric=null"], ["mAcc", "aAcc:min"], jobs=1, work_dir=tmp_path)
    assert plan.metrics == {"mAcc": "max", "aAcc": "min"}


def test_cores_are_split_evenly_and_never_shared():
    assert split_cores([0, 1, 2, 3, 4], 2) == [[0, 1], [2, 3]]
    assert split_cores([4, 5], 2) == [[4], [5]]
    with pytest.raises(ConfigError) as refused:
        split_cores([4, 5], 3)
    assert f"`error: {refused.value}`" in TROUBLESHOOTING


def test_jobs_beyond_the_runs_give_their_cores_to_the_runs(tmp_path):
    plan = make_plan([str(QUICKSTART)], [0], ["device=cpu"], None, jobs=4, work_dir=tmp_path, cores=[0, 1, 2, 3])
    assert (plan.jobs, plan.threads, plan.core_sets) == (1, 4, [[0, 1, 2, 3]])
    assert plan.metrics == {"mIoU": "max"}  # the config's train.best_metric and best_mode


def test_a_folder_holding_another_commands_run_is_refused(tmp_path):
    plan = make_plan([str(QUICKSTART)], [0], ["device=cpu"], None, jobs=1, work_dir=tmp_path)
    plan.pairs[0].folder.mkdir(parents=True)
    plan.pairs[0].write_record(0)
    assert plan.pairs[0].state() == "finished"
    make_plan([str(QUICKSTART)], [0], ["device=cpu"], None, jobs=1, work_dir=tmp_path)  # the same command: fine
    with pytest.raises(ConfigError, match=r"unet_shapes/seed0: holds a run of another config or overrides"):
        make_plan([str(QUICKSTART)], [0], ["device=cpu", "train.max_iters=7"], None, jobs=1, work_dir=tmp_path)


@pytest.mark.skipif(len(available_cores()) < 2, reason="needs 2 cores")
def test_each_run_gets_its_own_cores_and_as_many_threads(tmp_path):
    """The runner's command is the caller's: a script that reports what a run would see."""
    report = tmp_path / "report.py"
    report.write_text("import os, sys\nprint(sorted(os.sched_getaffinity(0)), os.environ['OMP_NUM_THREADS'], sys.argv[1:])\n")
    cores = available_cores()[:2]
    plan = make_plan([str(QUICKSTART)], [0, 1], ["device=cpu"], None, jobs=2, work_dir=tmp_path / "out", cores=cores)
    outcomes, stopped = run_pairs(plan, [sys.executable, str(report)], say=lambda line: None, poll_seconds=0.01)
    assert [o.status for o in outcomes] == ["finished", "finished"] and stopped is None
    seen = [pair.log_path.read_text().splitlines()[-1] for pair in plan.pairs]
    work = [str(pair.run_dir) for pair in plan.pairs]
    assert sorted(seen) == sorted([
        f"[{cores[0]}] 1 ['--config', '{QUICKSTART}', '--work-dir', '{work[0]}', 'device=cpu', 'seed=0']",
        f"[{cores[1]}] 1 ['--config', '{QUICKSTART}', '--work-dir', '{work[1]}', 'device=cpu', 'seed=1']"])
    assert [pair.state() for pair in plan.pairs] == ["finished", "finished"]


def test_best_leaves_out_the_untrained_network_and_follows_the_direction():
    curve = [(0, 0.9), (10, 0.5), (20, 0.4), (30, 0.45)]
    assert final_and_best(curve, "max") == {"final": 0.45, "final_iter": 30, "best": 0.5, "best_iter": 10}
    assert final_and_best(curve, "min") == {"final": 0.45, "final_iter": 30, "best": 0.4, "best_iter": 20}
    assert final_and_best([(0, 0.9)], "max")["best"] == 0.9  # nothing else evaluated
    assert parse_metric("L1:min") == ("L1", "min") and parse_metric("PSNR") == ("PSNR", None)
    assert parse_metric("a:b") == ("a:b", None)


def test_a_run_ended_by_a_signal_passed_on_is_stopped_not_failed(tmp_path):
    pair = make_plan([str(QUICKSTART)], [0], ["device=cpu"], None, jobs=1, work_dir=tmp_path).pairs[0]
    assert outcome_of(pair, 143).status == "stopped" and outcome_of(pair, 143).error == "stopped by SIGTERM; rerun to resume it"
    assert outcome_of(pair, -15, stopping=True).status == "stopped"  # before train.py's handler was set up
    assert (outcome_of(pair, -9).status, outcome_of(pair, -9).error) == ("failed", "killed by SIGKILL")
    pair.folder.mkdir(parents=True)
    pair.log_path.write_text("\n== start: x\nerror: old mistake\n== resume: y\nsome output\nerror: a\nerror: b\n")
    assert (outcome_of(pair, 2).status, outcome_of(pair, 2).error) == ("failed", "a; b")  # the last attempt's lines
    pair.log_path.write_text("Traceback ...\n")
    assert outcome_of(pair, 1).error == f"exit status 1 (see {pair.log_path})"


def test_paired_differences_count_only_common_seeds_and_ties_as_neither():
    result = paired({0: 1.0, 1: 2.0, 2: 3.0, 5: 9.0}, {0: 0.5, 1: 2.0, 2: 3.5})
    assert (result["n"], result["higher"], result["lower"]) == (3, 1, 1)
    assert (result["mean"], result["min"], result["max"]) == (0.0, -0.5, 0.5)
