"""`threads: auto | N` (issue 53, item 1): intra-op threads from the cores this process may use
(its affinity mask, capped by the cgroup CPU quota of a container), an OMP_NUM_THREADS of the
user's kept, N pinned; one log line saying which and why; data-loader workers count the same
cores. cgroup files are written in a temp dir in each layout (v2 `cpu.max`, v1 cfs files)."""

import pytest
import torch

from framework.config import load_config
from framework.data.loader import auto_workers
from framework.runtime.threads import cgroup_quota, resolve_threads, usable_cores
from support import REPO, TINY_SEGMENTATION, call_tool


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
