"""tools/compare.py --launcher worker: processes sharing a work dir share out the runs (each run
once), a worker killed with SIGKILL leaves its run to the next one, which resumes it; the claim
itself (atomic, stale on this host when its processes are gone, from another host when its
heartbeat is old)."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from framework.comparison.plan import Pair
from framework.comparison.worker import claim_path, filesystem_of, sharing_note, try_claim
from support import REPO

QUICKSTART = REPO / "configs/segmentation/unet_shapes.yaml"
TINY = ["device=cpu", "deterministic=true", "threads=1", "task.model.base_channels=8", "task.model.depth=2",
        "data.train.dataset.size=32", "data.train.dataset.num_samples=16", "data.train.batch_size=4",
        "data.train.num_workers=0", "data.val.dataset.size=32", "data.val.dataset.num_samples=8",
        "data.val.batch_size=8", "train.val_interval=20", "train.ckpt_interval=10",
        "train.log_interval=20", "train.vis_images=0", "loggers=[]"]


def worker(config: Path, seeds: list[str], work_dir: Path, iters: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(REPO / "tools/compare.py"), "--launcher", "worker", "--configs", str(config),
               "--seeds", *seeds, "--work-dir", str(work_dir), *TINY, f"train.max_iters={iters}"]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    path = tmp_path_factory.mktemp("configs") / "fast.yaml"
    path.write_text(f"_base_: [{QUICKSTART}]\n")
    return path


def test_two_workers_at_once_run_each_pair_exactly_once(config, tmp_path):
    work_dir = tmp_path / "grid"
    workers = [worker(config, ["0", "1"], work_dir, iters=20) for _ in range(2)]
    outputs = [w.communicate(timeout=300)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], outputs
    for seed in (0, 1):
        log = (work_dir / f"fast/seed{seed}.log").read_text()
        assert log.count("\n== start:") == 1 and "== resume" not in log, log[-2000:]
        assert json.loads((work_dir / f"fast/seed{seed}.json").read_text())["returncode"] == 0
        assert not claim_path(Pair("fast", str(config), seed, "", work_dir / "fast")).exists()
    started = [line for out in outputs for line in out.splitlines() if ": started by " in line]
    assert sorted(line.split(":")[0] for line in started) == ["fast seed 0", "fast seed 1"]


def test_a_killed_workers_run_is_taken_over_and_finished(config, tmp_path):
    work_dir = tmp_path / "grid"
    first = worker(config, ["0"], work_dir, iters=50)
    checkpoints = work_dir / "fast/seed0/checkpoints"
    deadline = time.monotonic() + 240
    while not (checkpoints / "iter_10.pth").exists():
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()[0] if first.poll() is not None else "no iter 10"
        time.sleep(0.1)
    first.send_signal(signal.SIGKILL)
    first.communicate()
    second = worker(config, ["0"], work_dir, iters=50)
    output = second.communicate(timeout=400)[0]
    assert second.returncode == 0, output
    assert "fast seed 0: taking over (its worker (pid" in output
    log = (work_dir / "fast/seed0.log").read_text()
    assert log.count("\n== start:") == 1 and log.count("\n== resume:") == 1
    records = [json.loads(line) for line in (work_dir / "fast/seed0/metrics.jsonl").read_text().splitlines()]
    assert records[-1]["iter"] == 50


def pair_in(folder: Path) -> Pair:
    return Pair("a", "a.yaml", 0, "f", folder / "a")


def test_a_claim_is_exclusive_while_its_worker_lives(tmp_path):
    pair = pair_in(tmp_path)
    assert try_claim(pair, 600, print)
    assert not try_claim(pair, 600, print)  # this process holds it and is alive
    assert json.loads(claim_path(pair).read_text())["pid"] == os.getpid()


def test_a_claim_of_a_dead_process_on_this_host_is_taken_over(tmp_path):
    pair = pair_in(tmp_path)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pair.folder.mkdir(parents=True)
    claim_path(pair).write_text(json.dumps({"host": socket.gethostname(), "pid": int(gone.stdout), "run_pid": None}))
    said = []
    assert try_claim(pair, 600, said.append)
    assert json.loads(claim_path(pair).read_text())["pid"] == os.getpid()
    assert "taking over" in said[0] and str(int(gone.stdout)) in said[0]


@pytest.mark.parametrize("age_s, taken", [(599.0, False), (601.0, True)])
def test_a_claim_from_another_host_is_taken_over_when_its_heartbeat_is_old(tmp_path, age_s, taken):
    pair = pair_in(tmp_path)
    pair.folder.mkdir(parents=True)
    claim_path(pair).write_text(json.dumps({"host": "elsewhere", "pid": 1, "run_pid": 2}))
    beat = time.time() - age_s
    os.utime(claim_path(pair), (beat, beat))
    said = []
    assert try_claim(pair, 600, said.append) is taken
    assert (json.loads(claim_path(pair).read_text())["host"] == socket.gethostname()) is taken
    if taken:
        assert "no heartbeat from elsewhere for 10.0 min" in said[0]


def test_the_worker_says_which_filesystem_holds_the_work_dir(tmp_path):
    kind, point = filesystem_of(tmp_path)
    note = sharing_note(tmp_path)
    assert f"is on {kind} ({point}" in note
