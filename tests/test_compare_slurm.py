"""tools/compare.py --launcher slurm on a real Slurm (tests/scripts/slurm_cluster.sh; .ci/run starts
it): 2 configs x 3 seeds as ONE job array, the report while tasks are pending and after, a second
submit that submits nothing, a task stopped with SIGUSR1 mid-run that is requeued and resumes
bit-identical to an uninterrupted local run, a failing task named in the report. Skipped, with
the reason, where no Slurm answers."""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import torch

from support import REPO, call_tool

pytestmark = pytest.mark.slurm

QUICKSTART = REPO / "configs/segmentation/unet_shapes.yaml"
DEFAULT_CONF = Path(os.environ.get("SEGAN_SLURM_DIR", "/tmp/segan-slurm")) / "slurm.conf"
# 40 iterations, a checkpoint every 10: the stop lands between the first checkpoint and the end
TINY = ["device=cpu", "deterministic=true", "task.model.base_channels=8", "task.model.depth=2",
        "data.train.dataset.size=32", "data.train.dataset.num_samples=32", "data.train.batch_size=4",
        "data.train.num_workers=0", "data.val.dataset.size=32", "data.val.dataset.num_samples=8",
        "data.val.batch_size=8", "train.max_iters=40", "train.val_interval=20", "train.ckpt_interval=10",
        "train.log_interval=20", "train.vis_images=0", "loggers=[]",
        "threads=1"]  # a Slurm task and the local reference use as many threads: the same float reductions


SEEDS = ["0", "1", "2"]  # 2 configs x 3 seeds: issue 64's grid


def slurm_missing() -> str | None:
    """Why these tests cannot run here (None: a cluster answers with an idle or busy node)."""
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return "no Slurm client (sbatch, sinfo) on PATH; bash tests/scripts/slurm_cluster.sh start"
    try:
        import submitit  # noqa: F401
    except ImportError:
        return "submitit is not installed (pip install -e '.[cluster]')"
    if "SLURM_CONF" not in os.environ and DEFAULT_CONF.is_file():
        os.environ["SLURM_CONF"] = str(DEFAULT_CONF)  # the cluster tests/scripts/slurm_cluster.sh started
    done = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=30)
    if done.returncode != 0 or not {"idle", "mix", "alloc"} & set(done.stdout.split()):
        return f"no Slurm node up (sinfo: {(done.stderr or done.stdout).strip() or 'no node'})"
    return None


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    missing = slurm_missing()
    if missing:
        pytest.skip(missing)
    folder = tmp_path_factory.mktemp("configs")
    (folder / "fast.yaml").write_text(f"_base_: [{QUICKSTART}]\n")
    (folder / "slow.yaml").write_text(f"_base_: [{QUICKSTART}]\noptim: {{lr: 1.0e-3}}\n")
    # valid as a config; its run fails when it looks for the weights
    (folder / "broken.yaml").write_text(f"_base_: [{QUICKSTART}]\nload_from: {folder / 'missing.pth'}\n")
    return folder


def submit(configs, seeds, work_dir):
    return call_tool("compare", "--launcher", "slurm", "--configs", *configs, "--seeds", *seeds,
                     "--work-dir", work_dir, *TINY)


def queued(array: str) -> list[str]:
    done = subprocess.run(["squeue", "-h", "-r", "-j", array, "-o", "%i"], capture_output=True, text=True)
    return done.stdout.split()


def statuses(work_dir: Path) -> dict[str, str]:
    summary = json.loads((work_dir / "summary.json").read_text())
    return {f"{r['name']}/{run['seed']}": run["status"] for r in summary["results"] for run in r["runs"]}


@pytest.fixture(scope="module")
def grid(configs, tmp_path_factory):
    """The grid and the broken config submitted; the report while pending; a second submit;
    fast seed 0 stopped with SIGUSR1 after its first checkpoint; everything waited for."""
    root = tmp_path_factory.mktemp("slurm")
    work_dir, broken_dir = root / "grid", root / "broken"
    first = submit([configs / "fast.yaml", configs / "slow.yaml"], SEEDS, work_dir)
    assert first.returncode == 0, first.stderr + first.stdout
    broken = submit([configs / "broken.yaml"], ["0"], broken_dir)
    assert broken.returncode == 0, broken.stderr + broken.stdout
    jobs = json.loads((work_dir / "slurm_jobs.json").read_text())
    early = call_tool("compare", "--report", "--work-dir", work_dir)
    early_statuses = statuses(work_dir)
    again = submit([configs / "fast.yaml", configs / "slow.yaml"], SEEDS, work_dir)
    # fast seed 0 (task 0 of the array): stopped once it has saved its first checkpoint
    deadline = time.monotonic() + 180
    checkpoints = work_dir / "fast/seed0/checkpoints"
    while not (checkpoints / "iter_10.pth").exists():
        assert time.monotonic() < deadline, "fast seed 0 never saved iter 10"
        time.sleep(0.1)
    # the step (".0"): Slurm 22.05 signals an array task with pending siblings, then says "Job can not be
    # altered now" and scancel retries until it can, signalling the requeued attempt too
    subprocess.run(["scancel", "--signal=USR1", jobs["fast/seed0"] + ".0"], check=True, timeout=30)
    arrays = {job.split("_")[0] for job in jobs.values()} | {json.loads((broken_dir / "slurm_jobs.json").read_text())["broken/seed0"].split("_")[0]}
    while any(queued(array) for array in arrays):
        assert time.monotonic() < deadline, f"Slurm still holds {[queued(a) for a in arrays]}"
        time.sleep(0.5)
    return {"work_dir": work_dir, "broken_dir": broken_dir, "first": first, "jobs": jobs, "early": early,
            "early_statuses": early_statuses, "again": again}


def test_the_grid_is_one_job_array_of_six_tasks(grid):
    jobs = grid["jobs"]
    arrays = {job.split("_")[0] for job in jobs.values()}
    assert len(arrays) == 1 and sorted(job.split("_")[1] for job in jobs.values()) == ["0", "1", "2", "3", "4", "5"]
    assert f"job array {arrays.pop()}" in grid["first"].stdout


def test_the_report_while_tasks_wait_marks_them(grid):
    assert grid["early"].returncode == 0, grid["early"].stderr
    assert set(grid["early_statuses"].values()) <= {"pending", "running", "finished"}
    assert "pending" in grid["early_statuses"].values()  # 2 CPUs, 7 tasks: some wait
    assert "runs:" in grid["early"].stdout and "pending" in grid["early"].stdout


def test_a_second_submit_submits_nothing(grid):
    again = grid["again"]
    assert again.returncode == 0, again.stderr
    assert "nothing to submit" in again.stdout
    assert json.loads((grid["work_dir"] / "slurm_jobs.json").read_text()) == grid["jobs"]


def test_the_report_after_holds_every_run_and_the_failure(grid):
    final = call_tool("compare", "--report", "--work-dir", grid["work_dir"])
    assert final.returncode == 0, final.stderr + final.stdout
    assert set(statuses(grid["work_dir"]).values()) == {"finished"}
    broken = call_tool("compare", "--report", "--work-dir", grid["broken_dir"])
    assert broken.returncode == 1
    assert statuses(grid["broken_dir"]) == {"broken/0": "failed"}
    assert "broken seed 0: failed: checkpoint not found" in broken.stdout


def test_the_stopped_task_was_requeued_and_the_grid_ends_as_it_does_locally(grid, configs, tmp_path):
    """The Slurm grid's summary.json against --launcher local's on the same grid: the same runs,
    the same numbers, though fast seed 0 was stopped and requeued on the way; its final weights
    bit-identical to the uninterrupted local run's."""
    work_dir = grid["work_dir"]
    log = (work_dir / "fast/seed0.log").read_text()
    assert "== resume" in log  # the requeued attempt continued from the checkpoint
    local = call_tool("compare", "--configs", configs / "fast.yaml", configs / "slow.yaml", "--seeds", *SEEDS,
                      "--jobs", "2" if len(os.sched_getaffinity(0)) >= 2 else "1", "--work-dir", tmp_path / "local", *TINY)
    assert local.returncode == 0, local.stderr + local.stdout[-2000:]
    on_slurm = json.loads((work_dir / "summary.json").read_text())
    assert on_slurm["threads_per_run"] == 1  # cpus_per_task
    assert on_slurm["results"] == json.loads((tmp_path / "local/summary.json").read_text())["results"]
    slurm_state = torch.load(work_dir / "fast/seed0/checkpoints/iter_40.pth", map_location="cpu", weights_only=False)["task"]
    local_state = torch.load(tmp_path / "local/fast/seed0/checkpoints/iter_40.pth", map_location="cpu",
                             weights_only=False)["task"]
    assert slurm_state.keys() == local_state.keys()
    assert all(torch.equal(slurm_state[name], local_state[name]) for name in local_state)


def test_a_partition_slurm_does_not_have_is_its_refusal_quoted_and_nothing_is_written(configs, tmp_path):
    result = call_tool("compare", "--launcher", "slurm", "--slurm", "partition=nowhere", "--configs",
                       configs / "fast.yaml", "--seeds", "0", "--work-dir", tmp_path / "out", *TINY)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: --launcher slurm: sbatch refused the array: sbatch: error: invalid partition specified: nowhere"]
    assert not (tmp_path / "out").exists()
