"""Slurm without torchrun: the node-list parser, Slurm's variables turned into torch's, and real
2-process runs started as srun would start them (SLURM_* variables on 127.0.0.1) that equal the
torchrun run, stop on SIGUSR1 with the status the job script requeues on, and resume when requeued."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from framework.dist.slurm import expand_hostlist, slurm_to_torch_environment
from framework.errors import ConfigError
from probes import read_losses
from support import REPO, free_port, named, run_forked_ranks


@pytest.mark.parametrize("nodelist, hosts", [
    ("node07", ["node07"]),
    ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
    ("gpu[8-11]", ["gpu8", "gpu9", "gpu10", "gpu11"]),
    ("gpu[08-11]", ["gpu08", "gpu09", "gpu10", "gpu11"]),
    ("a[1-2],b3,c[007-008]", ["a1", "a2", "b3", "c007", "c008"]),
    ("gpu-a[1-2]-ib", ["gpu-a1-ib", "gpu-a2-ib"]),
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
    ("127.0.0.[1,2]", ["127.0.0.1", "127.0.0.2"]),
    ("host1, host2", ["host1", "host2"]),
])
def test_compressed_node_lists_expand_in_order(nodelist, hosts):
    assert expand_hostlist(nodelist) == hosts


@pytest.mark.parametrize("nodelist, message", [
    ("node[01-03", r"unbalanced brackets in 'node\[01-03'"),
    ("node01]", r"unbalanced brackets in 'node01\]'"),
    ("node[03-01]", "'03-01' is not a number or a range like 01-04"),
    ("node[a-b]", "'a-b' is not a number"),
    ("", "names no host"),
])
def test_malformed_node_lists_are_named(nodelist, message):
    with pytest.raises(ConfigError, match=message):
        expand_hostlist(nodelist)


def slurm_env(rank, world_size=2, **extra):
    return {"SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank), "SLURM_NTASKS": str(world_size),
            "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_JOB_ID": "123456", **extra}


def test_slurm_variables_become_torch_variables():
    env = slurm_env(1, 8, SLURM_LOCALID="1", SLURM_TASKS_PER_NODE="4(x2)")
    set_ = slurm_to_torch_environment(env)
    assert set_ == {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "MASTER_ADDR": "gpu07",
                    "MASTER_PORT": str(15000 + 123456 % 20000), "LOCAL_WORLD_SIZE": "4"}
    assert {k: env[k] for k in set_} == set_
    # srun's own step values first; MASTER_ADDR/MASTER_PORT from the environment win
    env = slurm_env(0, 8, SLURM_STEP_NUM_TASKS="4", SLURM_STEP_NODELIST="cpu[3-4]", MASTER_PORT="29500")
    assert slurm_to_torch_environment(env)["WORLD_SIZE"] == "4"
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("cpu3", "29500")


@pytest.mark.parametrize("env", [
    slurm_env(0, 1),  # one task: nothing to join
    {**slurm_env(0), "TORCHELASTIC_RUN_ID": "x"},  # torchrun inside the allocation sets the ranks itself
    {**slurm_env(0), "RANK": "0"},
    {k: v for k, v in slurm_env(0).items() if k != "SLURM_PROCID"},
])
def test_no_slurm_group_without_srun_tasks(env):
    before = dict(env)
    assert slurm_to_torch_environment(env) == {} and env == before


# ---------------------------------------------------------------------------- real runs

CONFIG = REPO / "configs/segmentation/unet_shapes.yaml"
MAX_ITERS = 12
RUN = ["device=cpu", "seed=3", f"train.max_iters={MAX_ITERS}", "train.val_interval=0", "train.ckpt_interval=12",
       "train.log_interval=1", "task.model.norm=none", "task.model.base_channels=8", "task.model.depth=2",
       "data.train.dataset.num_samples=32", "data.train.dataset.size=32", "data.train.batch_size=2",
       "data.train.num_workers=0", "custom_imports=[probes]", "dist.timeout=60",
       "optim={type: SGD, lr: 0.05, momentum: 0.9, scheduler: {type: WarmupLR, warmup_iters: 2}}"]
BASE_ENV = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TORCHELASTIC_"))
            and k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
BASE_ENV.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")


def recorder(work_dir, delay=0.0):
    return f"hooks=[{{type: LossRecorderHook, path: '{work_dir / 'losses.txt'}', delay: {delay}}}]"


def srun(work_dir, *args, delay=0.0, **slurm):
    """What `srun --ntasks=2 python tools/train.py ...` starts: two processes told their ranks by
    SLURM_* variables only, the node list naming 127.0.0.1 first."""
    port = str(free_port())
    return [subprocess.Popen([sys.executable, str(REPO / "tools/train.py"), "--config", CONFIG, "--work-dir", work_dir,
                              *RUN, recorder(work_dir, delay), *args],
                             cwd=REPO / "tests", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**BASE_ENV, **slurm_env(rank, SLURM_JOB_NODELIST="127.0.0.[1-2]",
                                                          MASTER_PORT=port, **slurm)})
            for rank in (0, 1)]


def finish(processes, timeout=240):
    return [(p.wait(timeout), *p.communicate()) for p in processes]


@pytest.fixture(scope="module")
def torchrun_run(tmp_path_factory):
    """The reference: two ranks told their ranks by torchrun's variables (run_forked_ranks)."""
    work_dir = tmp_path_factory.mktemp("torchrun")
    result = run_forked_ranks(2, "train", "--config", CONFIG, "--work-dir", work_dir, *RUN, recorder(work_dir),
                              cwd=REPO / "tests", folder=tmp_path_factory.mktemp("torchrun_out"))
    assert result.returncode == 0, result.stderr[-3000:]
    return work_dir


def assert_same_run(work_dir, reference):
    for losses in ("losses.txt", "losses.txt.rank1"):  # every iteration's losses, on each rank
        expected = dict(read_losses(reference / losses))
        recorded = read_losses(work_dir / losses)
        assert sorted({it for it, _ in recorded}) == list(range(1, MAX_ITERS + 1))
        assert all(value == expected[it] for it, value in recorded), losses
    final = [torch.load(d / f"checkpoints/iter_{MAX_ITERS}.pth", weights_only=True) for d in (work_dir, reference)]
    for key, tensor in final[1]["task"].items():
        torch.testing.assert_close(final[0]["task"][key], tensor, atol=0, rtol=0, msg=named(key))


def test_srun_without_torchrun_equals_the_torchrun_run(torchrun_run, tmp_path):
    results = finish(srun(tmp_path))
    assert [code for code, _, _ in results] == [0, 0], results
    assert "srun: 2 processes from SLURM_* variables, master 127.0.0.1:" in results[0][1]
    assert "processes 2  batch 2 per process" in results[0][1]
    assert_same_run(tmp_path, torchrun_run)


def test_sigusr1_saves_exits_138_and_the_requeued_job_resumes_identical(torchrun_run, tmp_path):
    """Slurm's warning before the time limit (`--signal=USR1@120`) reaches every task: they stop
    at one iteration, rank 0 saves it, both exit 138 (the job script requeues on it); the
    requeued job (SLURM_RESTART_COUNT=1, auto_resume: auto) resumes and ends as if never stopped."""
    losses = tmp_path / "losses.txt"
    processes = srun(tmp_path, delay=0.3)
    deadline = time.monotonic() + 120
    while not (losses.exists() and len(losses.read_text().splitlines()) >= 3):
        assert all(p.poll() is None for p in processes) and time.monotonic() < deadline, finish(processes)
        time.sleep(0.05)
    for process in processes:
        process.send_signal(signal.SIGUSR1)
    results = finish(processes)
    assert [code for code, _, _ in results] == [138, 138], results
    stop = int(results[0][1].split("stopped by SIGUSR1 at iteration ")[1].split(":")[0])
    assert stop < MAX_ITERS and (tmp_path / "checkpoints/latest").read_text() == f"iter_{stop}.pth"

    results = finish(srun(tmp_path, SLURM_RESTART_COUNT="1"))
    assert [code for code, _, _ in results] == [0, 0], results
    assert f"iter_{stop}.pth at iteration {stop}" in results[0][1]
    assert_same_run(tmp_path, torchrun_run)


@pytest.mark.parametrize("restart, taken_over", [(1, True), (0, False)])
def test_a_requeued_job_takes_over_its_earlier_lock_from_another_node(tmp_path, monkeypatch, restart, taken_over):
    """The earlier attempt was killed on another node, its lock left behind; the requeued attempt
    (same job, a higher SLURM_RESTART_COUNT) takes it over; a lock of the same attempt is refused."""
    import json

    from framework.runtime.workdir import claim_work_dir

    (tmp_path / ".lock").write_text(json.dumps({"pid": 1, "host": "gpu07", "started": "earlier",
                                                "slurm_job": "123456", "slurm_restart": 0}))
    monkeypatch.setenv("SLURM_JOB_ID", "123456")
    monkeypatch.setenv("SLURM_RESTART_COUNT", str(restart))
    if taken_over:
        with claim_work_dir(tmp_path, resuming=True):
            assert json.loads((tmp_path / ".lock").read_text())["slurm_restart"] == 1
    else:
        with pytest.raises(ConfigError, match="is in use by pid 1 on host gpu07"):
            with claim_work_dir(tmp_path, resuming=True):
                pass


# ------------------------------------------------------------------ broken Slurm environments

def test_the_last_rank_is_accepted_and_one_past_it_refused():
    """SLURM_PROCID == SLURM_NTASKS - 1 is the last rank; == SLURM_NTASKS would wait for a group
    that can never fill (the whole dist.timeout): refused at once. LOCALID differs from PROCID."""
    env = slurm_env(5, 6, SLURM_LOCALID="2", SLURM_TASKS_PER_NODE="3(x2)")
    assert slurm_to_torch_environment(env) == {"RANK": "5", "LOCAL_RANK": "2", "WORLD_SIZE": "6",
                                               "MASTER_ADDR": "gpu07", "MASTER_PORT": str(15000 + 123456 % 20000),
                                               "LOCAL_WORLD_SIZE": "3"}
    env = slurm_env(6, 6, SLURM_LOCALID="2")
    with pytest.raises(ConfigError, match=r"^Slurm: SLURM_PROCID is 6 but SLURM_NTASKS is 6: ranks are 0\.\.5$"):
        slurm_to_torch_environment(env)
    assert "RANK" not in env  # nothing half-set
    # srun's own count comes first, and is the one named
    with pytest.raises(ConfigError, match="SLURM_PROCID is 4 but SLURM_STEP_NUM_TASKS is 4"):
        slurm_to_torch_environment(slurm_env(4, 8, SLURM_STEP_NUM_TASKS="4"))


@pytest.mark.parametrize("local_id, refused", [("2", False), ("3", True)])
def test_a_local_id_beyond_the_tasks_per_node_is_refused(local_id, refused):
    env = slurm_env(1, 6, SLURM_LOCALID=local_id, SLURM_TASKS_PER_NODE="3(x2)")
    if refused:
        with pytest.raises(ConfigError, match=r"^Slurm: SLURM_LOCALID is 3: expected 0\.\.2$"):
            slurm_to_torch_environment(env)
    else:
        assert slurm_to_torch_environment(env)["LOCAL_RANK"] == "2"


@pytest.mark.parametrize("name, value", [("SLURM_NTASKS", "two"), ("SLURM_NTASKS", "2(x2)"),
                                         ("SLURM_STEP_NUM_TASKS", ""), ("SLURM_PROCID", "-1"),
                                         ("SLURM_LOCALID", "0x1")])
def test_a_count_or_rank_that_is_not_a_number_is_named(name, value):
    with pytest.raises(ConfigError, match=rf"^Slurm: {name} is '{re.escape(value)}', not a number"):
        slurm_to_torch_environment(slurm_env(1, 2, **{name: value}))


def test_a_master_host_that_does_not_resolve_is_named_with_its_slurm_source(monkeypatch):
    """init_distributed refuses before any rank waits: the node list's first host is not a name
    this host resolves (.invalid never does)."""
    from framework.dist import init_distributed

    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "TORCHELASTIC_RUN_ID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST"):
        monkeypatch.setenv(name, "x")  # recorded, so the values slurm.py sets are removed afterwards
        monkeypatch.delenv(name)
    for name, value in slurm_env(1, SLURM_JOB_NODELIST="nosuch[1-2].invalid").items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=r"^MASTER_ADDR \(from the first host of SLURM_JOB_NODELIST\) "
                                          r"'nosuch1.invalid' does not resolve on this host"):
        init_distributed(startup_timeout_s=1)


def test_a_configured_requeue_signal_stops_with_a_checkpoint(tmp_path):
    """dist.requeue_signal=USR2 (a cluster whose job scripts send `--signal=USR2@120`): both tasks
    stop at one iteration, rank 0 saves it, both exit 128 + 12."""
    losses = tmp_path / "losses.txt"
    processes = srun(tmp_path, "dist.requeue_signal=USR2", delay=0.3)
    deadline = time.monotonic() + 120
    while not (losses.exists() and len(losses.read_text().splitlines()) >= 2):
        assert all(p.poll() is None for p in processes) and time.monotonic() < deadline, finish(processes)
        time.sleep(0.05)
    for process in processes:
        process.send_signal(signal.SIGUSR2)
    results = finish(processes)
    assert [code for code, _, _ in results] == [140, 140], results
    stop = int(results[0][1].split("stopped by SIGUSR2 at iteration ")[1].split(":")[0])
    assert (tmp_path / "checkpoints/latest").read_text() == f"iter_{stop}.pth"
