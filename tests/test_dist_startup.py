"""Joining the process group (framework/dist/startup.py): torchrun's variables checked at once,
and the start-up barrier that names the ranks that never came, in `dist.startup_timeout`
seconds instead of `dist.timeout`. The barrier runs on a real TCPStore on 127.0.0.1 (ranks as
threads), and end to end through tools/train.py with a rank that never starts."""

import threading
import time

import pytest

from framework.dist.startup import StartupError, check_launch_environment, join_group_store
from framework.errors import ConfigError
from support import REPO, free_port, run_forked_tool

CONFIG = REPO / "configs/segmentation/unet_shapes.yaml"


def torchrun_env(**changes):
    env = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    return {k: v for k, v in {**env, **changes}.items() if v is not None}


@pytest.mark.parametrize("changes", [{}, {"RANK": "3"}, {"LOCAL_RANK": "0", "RANK": "0"}, {"MASTER_PORT": "65535"},
                                     {"MASTER_PORT": "1"}, {"LOCAL_WORLD_SIZE": None, "LOCAL_RANK": "3"},
                                     {"WORLD_SIZE": "1", "RANK": "7", "MASTER_ADDR": None}])  # one process: unused
def test_launch_variables_in_range_are_accepted(changes):
    check_launch_environment(torchrun_env(**changes))


@pytest.mark.parametrize("changes, message", [
    ({"RANK": "4"}, r"^RANK is 4 but WORLD_SIZE is 4: ranks are 0\.\.3$"),  # the boundary: 3 is the last rank
    ({"LOCAL_RANK": "2"}, r"^LOCAL_RANK is 2 but LOCAL_WORLD_SIZE is 2: ranks are 0\.\.1$"),
    ({"WORLD_SIZE": "four"}, r"^WORLD_SIZE is 'four': expected an integer$"),
    ({"WORLD_SIZE": "0"}, r"^WORLD_SIZE is 0: expected >= 1$"),
    ({"RANK": "-1"}, r"^RANK is -1: expected >= 0$"),
    ({"LOCAL_RANK": "gpu1"}, r"^LOCAL_RANK is 'gpu1': expected an integer$"),
    ({"MASTER_PORT": "65536"}, r"^MASTER_PORT is 65536: expected 1\.\.65535$"),
    ({"MASTER_PORT": "0"}, r"^MASTER_PORT is 0: expected 1\.\.65535$"),
    ({"MASTER_ADDR": None}, r"^WORLD_SIZE is 4 but MASTER_ADDR is not set"),
    ({"RANK": None}, r"^WORLD_SIZE is 4 but RANK is not set"),
    ({"MASTER_ADDR": "node9.invalid"}, r"^MASTER_ADDR 'node9.invalid' does not resolve on this host"),
])
def test_launch_variables_no_group_can_start_from_are_named(changes, message):
    with pytest.raises(ConfigError, match=message):
        check_launch_environment(torchrun_env(**changes))


def join_ranks(ranks, world_size, startup_timeout, delays=None):
    """join_group_store for each of `ranks` in a thread (after its delay): {index: store or error}.
    `world_size` is every rank's, or a list of each one's."""
    port, results = free_port(), {}
    sizes = world_size if isinstance(world_size, list) else [world_size] * len(ranks)

    def join(index, rank):
        time.sleep((delays or {}).get(index, 0))
        try:
            results[index] = join_group_store("127.0.0.1", port, rank, sizes[index], startup_timeout, 30, "attempt_0")
        except StartupError as err:
            results[index] = err

    threads = [threading.Thread(target=join, args=(i, r)) for i, r in enumerate(ranks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return port, results


def test_ranks_joining_within_the_startup_timeout_go_on():
    _, results = join_ranks([0, 1, 2], 3, startup_timeout=6, delays={2: 1.5})  # a late rank, in time
    assert not any(isinstance(r, Exception) for r in results.values()), results
    results[1].set("after", "start-up")  # the store they share stays usable
    assert results[2].get("after") == b"start-up"


def test_a_rank_that_never_joins_is_named_on_every_rank_within_the_startup_timeout():
    start = time.monotonic()
    port, results = join_ranks([0, 1, 3], 4, startup_timeout=1.5)
    assert time.monotonic() - start < 15
    expected = (f"rank 2 of 4 did not join at 127.0.0.1:{port} within 1.5 s (dist.startup_timeout): check that "
                "every process was started with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE")
    assert [str(results[i]) for i in range(3)] == [f"rank {r}: {expected}" for r in (0, 1, 3)]


def test_a_rank_started_twice_is_named_with_the_missing_one():
    port, results = join_ranks([0, 1, 1], 3, startup_timeout=1.5)
    assert "rank 2 of 3 did not join" in str(results[0])
    assert str(results[0]).endswith(f"; rank 1 started more than once at 127.0.0.1:{port} "
                                    "(RANK or SLURM_PROCID repeated?)")


def test_a_rank_told_another_world_size_is_refused_on_every_rank():
    """Rank 1 thinks the group has 3 ranks, rank 0 that it has 2: all joined rank 0's group, but
    rank 1 would wait for a rank 2 that never comes."""
    port, results = join_ranks([0, 1], [2, 3], startup_timeout=3)
    expected = (f"rank 1 with WORLD_SIZE 3 joined rank 0's group of WORLD_SIZE 2 at 127.0.0.1:{port}: every "
                "process must be given the same WORLD_SIZE")
    assert [str(results[i]) for i in range(2)] == [f"rank 0: {expected}", f"rank 1: {expected}"]


# ----------------------------------------------------------------------- through tools/train.py

RUN = ["device=cpu", "train.max_iters=1", "data.train.num_workers=0", "dist.startup_timeout=2"]


def alone(tmp_path, rank, *extra, env=()):
    port = free_port()
    group = {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
             "MASTER_PORT": str(port), **dict(env)}
    start = time.monotonic()
    result = run_forked_tool("train", "--config", CONFIG, "--work-dir", tmp_path / "wd", *RUN, *extra,
                             folder=tmp_path / "out", env=group, timeout=120)
    return port, result, time.monotonic() - start


def test_rank_0_alone_names_rank_1_in_one_line_and_writes_nothing(tmp_path):
    port, result, seconds = alone(tmp_path, 0)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (f"error: rank 0: rank 1 of 2 did not join at 127.0.0.1:{port} within 2 s "
                                     "(dist.startup_timeout): check that every process was started with the same "
                                     "MASTER_ADDR, MASTER_PORT and WORLD_SIZE")
    assert seconds < 60 and not (tmp_path / "wd").exists()


def test_rank_1_without_rank_0_names_the_host_and_port_it_waited_on(tmp_path):
    port, result, seconds = alone(tmp_path, 1)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().startswith(f"error: rank 1: nothing listens at 127.0.0.1:{port} after 2 s "
                                            "(dist.startup_timeout; ")
    assert seconds < 60 and not (tmp_path / "wd").exists()


def test_srun_rank_one_past_the_last_is_refused_at_once(tmp_path):
    slurm = {"SLURM_PROCID": "2", "SLURM_LOCALID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "127.0.0.1",
             "SLURM_JOB_ID": "77"}
    result = run_forked_tool("train", "--config", CONFIG, "--work-dir", tmp_path / "wd", *RUN,
                             folder=tmp_path / "out", env=slurm, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip() == "error: Slurm: SLURM_PROCID is 2 but SLURM_NTASKS is 2: ranks are 0..1"
