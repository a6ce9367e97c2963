"""`threads: auto | N` (issue 53, item 1): intra-op threads from the cores this process may use
(its affinity mask, capped by the cgroup CPU quota of a container), an OMP_NUM_THREADS of the
user's kept, N pinned; one log line saying which and why; data-loader workers count the same
cores. cgroup files are written in a temp dir in each layout (v2 `cpu.max`, v1 cfs files)."""

import shutil

import pytest
import torch

from framework.config import load_config
from framework.data.loader import auto_workers
from framework.errors import ConfigError
from framework.runtime import threads as threads_module
from framework.runtime.threads import (
    cgroup_quota,
    oversubscription_warning,
    resolve_threads,
    resumed_threads,
    usable_cores,
)
from support import REPO, TINY_SEGMENTATION, TINY_UNET, call_tool


@pytest.mark.parametrize("files, quota", [
    ({"cpu.max": "max 100000\n"}, None),                       # v2, unlimited
    ({"cpu.max": "250000 100000\n"}, 2.5),                     # v2, docker --cpus 2.5
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),  # v1, unlimited
    ({"cpu/cpu.cfs_quota_us": "50000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 0.5),
    ({"cpu,cpuacct/cpu.cfs_quota_us": "300000\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"}, 3.0),
    ({}, None),                                                 # no cgroup files (macOS)
])
def test_the_cgroup_quota_is_read_in_each_layout(tmp_path, files, quota):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cgroup_quota(tmp_path) == quota


@pytest.mark.parametrize("affinity, quota, cores", [
    (16, None, 16), (16, 2.5, 2), (16, 0.5, 1), (2, 8.0, 2), (4, 4.0, 4), (1, None, 1),
])
def test_usable_cores_is_the_affinity_capped_by_the_quota_rounded_down(affinity, quota, cores):
    assert usable_cores(affinity, quota)[0] == cores


def test_auto_keeps_omp_num_threads_and_a_number_pins():
    assert resolve_threads("auto", {"OMP_NUM_THREADS": "1"}, 16, None) == (
        None, "threads 1 (OMP_NUM_THREADS in the environment)")
    assert resolve_threads("auto", {}, 16, 2.5) == (
        2, "threads 2 (threads: auto: the CPU quota of this container, 2.5 cores, of 16 usable)")
    assert resolve_threads("auto", {}, 6, None) == (6, "threads 6 (threads: auto: 6 cores this process may use)")
    assert resolve_threads(3, {"OMP_NUM_THREADS": "1"}, 16, None) == (3, "threads 3 (threads: 3)")


def test_workers_count_the_same_cores():
    cpu = torch.device("cpu")
    assert auto_workers(cpu, cached=False, cores=16) == 4 and auto_workers(cpu, cached=False, cores=2) == 0


def test_threads_is_checked_like_every_key():
    config = REPO / "configs/segmentation/unet_shapes.yaml"
    assert load_config(config).threads == "auto" and load_config(config, ["threads=3"]).threads == 3
    for bad in ("threads=0", "threads=many"):
        with pytest.raises(Exception, match="threads"):
            load_config(config, [bad])


def test_a_run_sets_and_logs_its_threads(tmp_path, monkeypatch):
    before = torch.get_num_threads()
    try:
        result = call_tool("train", "--config", REPO / "configs/segmentation/unet_shapes.yaml", "--work-dir", tmp_path,
                           *TINY_SEGMENTATION, "train.max_iters=1", "train.val_interval=0", "threads=1")
        assert result.returncode == 0, result.stderr
        assert torch.get_num_threads() == 1 and "threads 1 (threads: 1)" in (tmp_path / "train.log").read_text()
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        result = call_tool("train", "--config", REPO / "configs/segmentation/unet_shapes.yaml", "--work-dir",
                           tmp_path / "auto", *TINY_SEGMENTATION, "train.max_iters=1", "train.val_interval=0")
        assert result.returncode == 0, result.stderr
        cores = usable_cores()[0]
        assert torch.get_num_threads() == cores and f"threads {cores} (threads: auto: " in \
            (tmp_path / "auto/train.log").read_text()
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("value", ["abc", "0", "-3", "4,2", "1.5"])
def test_an_omp_num_threads_openmp_ignores_is_refused_in_one_line(tmp_path, monkeypatch, value):
    """libgomp ignores these ("Invalid value") and torch runs one thread per core; the run logged
    `threads abc` (issue 63). Refused before the work dir is claimed."""
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    with pytest.raises(ConfigError, match="OMP_NUM_THREADS"):
        resolve_threads("auto", {"OMP_NUM_THREADS": value}, 2, None)
    result = call_tool("train", "--config", REPO / "configs/segmentation/unet_shapes.yaml", "--work-dir",
                       tmp_path / "wd", *TINY_SEGMENTATION, "train.max_iters=1")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.splitlines()) == 1 and "OMP_NUM_THREADS" in result.stderr and value in result.stderr
    assert not (tmp_path / "wd").exists()


def one_usable_core(monkeypatch, cores):
    """runtime.threads as on a machine where this process may use `cores[0]` cores (a list: a test
    changes it between runs, as `taskset -c 0` would)."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads_module, "usable_cores",
                        lambda affinity=None, quota="read": (cores[0], f"{cores[0]} cores this process may use"))


def test_more_threads_than_usable_cores_is_a_warning_naming_the_cores(tmp_path, monkeypatch):
    """`threads: 64` on 2 cores ran 200 times slower without a word (issue 63)."""
    assert oversubscription_warning(2, 2, "2 cores this process may use") is None
    warning = oversubscription_warning(64, 2, "2 cores this process may use")
    assert "threads 64" in warning and "2 cores" in warning
    before = torch.get_num_threads()
    one_usable_core(monkeypatch, [1])
    try:
        result = call_tool("train", "--config", REPO / "configs/segmentation/unet_shapes.yaml", "--work-dir", tmp_path,
                           *TINY_SEGMENTATION, "train.max_iters=1", "train.val_interval=0", "threads=2")
    finally:
        torch.set_num_threads(before)
    assert result.returncode == 0, result.stderr
    log = (tmp_path / "train.log").read_text()
    assert "warning: threads 2 is more than the usable cores (1 cores" in log


DETERMINISTIC_RUN = [*TINY_UNET, "data.train.num_workers=0", "train.max_iters=4", "train.ckpt_interval=2",
                     "train.val_interval=0", "train.log_interval=1"]


def train_deterministic(work_dir, *args):
    result = call_tool("train", "--config", REPO / "configs/segmentation/unet_shapes.yaml", "--work-dir", work_dir,
                       *DETERMINISTIC_RUN, *args)
    assert result.returncode == 0, result.stderr
    return torch.load(work_dir / "checkpoints/iter_4.pth", weights_only=True)


def test_a_deterministic_run_resumed_where_auto_takes_another_count_resumes_at_its_own(tmp_path, monkeypatch):
    """A `deterministic: true` run resumed where `threads: auto` took another count ended with 125
    of 176 tensors different from the uninterrupted run, without a word (issue 63). The checkpoint
    records the count; resumed on more cores, auto takes the recorded count again and the run ends
    bit for bit where the uninterrupted one did; resumed at a count the user chose (or on fewer
    cores than the count) it warns that the result will differ, and it does."""
    before, cores = torch.get_num_threads(), [1]
    one_usable_core(monkeypatch, cores)
    try:
        whole = train_deterministic(tmp_path / "whole")
        assert whole["meta"]["threads"] == 1
        resumed_dir = shutil.copytree(tmp_path / "whole", tmp_path / "resumed")
        chosen_dir = shutil.copytree(tmp_path / "whole", tmp_path / "chosen")
        cores[0] = 2  # the run moved to a machine (or a taskset) with more cores
        resumed = train_deterministic(resumed_dir, "--resume", resumed_dir / "checkpoints/iter_2.pth")
        chosen = train_deterministic(chosen_dir, "--resume", chosen_dir / "checkpoints/iter_2.pth", "threads=2")
    finally:
        torch.set_num_threads(before)
    differ = [k for k, v in whole["task"].items() if not torch.equal(v, resumed["task"][k])]
    assert not differ, f"{len(differ)} of {len(whole['task'])} tensors differ: {differ[:5]}"
    assert resumed["meta"]["threads"] == 1
    assert "threads 1 (the checkpoint's" in (resumed_dir / "train.log").read_text()
    assert any(not torch.equal(v, chosen["task"][k]) for k, v in whole["task"].items())  # what the warning says
    warning = [line for line in (chosen_dir / "train.log").read_text().splitlines() if "trained with" in line]
    assert len(warning) == 1 and "warning" in warning[0] and "1 thread at 2" in warning[0] and "differ" in warning[0], warning


def test_a_resume_that_cannot_take_the_recorded_count_says_the_result_will_differ():
    assert resumed_threads(2, 2, "auto", {}, cores=1) == (None, None, False)
    assert resumed_threads(None, 1, "auto", {}, cores=1) == (None, None, False)  # a checkpoint written before the count was recorded
    threads, line, warning = resumed_threads(4, 1, "auto", {}, cores=1)
    assert threads is None and warning and "4 threads" in line and "1 usable core" in line and "differ" in line
    threads, line, warning = resumed_threads(2, 1, 1, {}, cores=2)  # the user's threads: 1
    assert threads is None and warning and "threads: 1" in line and "differ" in line
    threads, line, warning = resumed_threads(2, 1, "auto", {"OMP_NUM_THREADS": "1"}, cores=2)
    assert threads is None and warning and "OMP_NUM_THREADS" in line
    assert resumed_threads(2, 1, "auto", {}, cores=2)[:1] == (2,)
