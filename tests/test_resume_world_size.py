"""A run resumed on another number of processes: it keeps its global batch (train.accumulate
changes where that divides; refused, naming the numbers, where not, unless
--allow-new-world-size) and continues the data at the same sample of the epoch. Real runs: a
2-process run resumed on 1 process and a 1-process run resumed on 2 end as the uninterrupted
runs do. Confusable numbers differ: 2 processes, batch 3, accumulate 2, global batch 6."""

import logging
import shutil

import pytest
import torch

from framework.data.sampler import EpochSampler
from framework.engine.resume import accumulate_on_resume
from framework.errors import CheckpointError
from support import REPO, named, run_forked_ranks

CONFIG = REPO / "configs/segmentation/unet_shapes.yaml"
# No BatchNorm (its statistics depend on the batch split), SGD, 8 iterations of a global batch of
# 6. 26 samples: 4 iterations an epoch on 1 process (8 batches of 3) and on 2 (4 batches of 3
# each), 2 samples dropped either way; the resume at iteration 3 is mid-epoch and crosses into
# the next epoch.
RUN = ["device=cpu", "amp.enabled=false", "seed=3", "train.max_iters=8", "train.val_interval=0", "train.ckpt_interval=3",
       "train.log_interval=1", "task.model.norm=none", "task.model.base_channels=8", "task.model.depth=2",
       "data.train.dataset.num_samples=26", "data.train.dataset.size=32", "data.train.num_workers=0",
       "data.train.batch_size=3", "optim={type: SGD, lr: 0.05, momentum: 0.9}"]
ONE_PROCESS = [*RUN, "train.accumulate=2"]  # 1 x 3 x 2 = 6
TWO_PROCESSES = [*RUN, "train.accumulate=1"]  # 2 x 3 x 1 = 6
ATOL = 1e-5  # float32 summation order only (see tests/test_distributed.py)


def train(nproc, work_dir, *args):
    return run_forked_ranks(nproc, "train", "--config", CONFIG, "--work-dir", work_dir, *args,
                            folder=work_dir.parent / f"{work_dir.name}_out")


def checkpoint(work_dir, iteration):
    return torch.load(work_dir / f"checkpoints/iter_{iteration}.pth", weights_only=True)


def assert_same_weights(a, b):
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=ATOL, rtol=0, msg=named(key))


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """Uninterrupted runs of global batch 6: 1 process x 3 x 2 and 2 processes x 3 x 1."""
    root = tmp_path_factory.mktemp("world_size")
    one, two = root / "one", root / "two"
    for nproc, work_dir, args in ((1, one, ONE_PROCESS), (2, two, TWO_PROCESSES)):
        result = train(nproc, work_dir, *args)
        assert result.returncode == 0, result.stderr[-3000:]
    assert_same_weights(checkpoint(one, 8)["task"], checkpoint(two, 8)["task"])
    return one, two


def test_the_checkpoint_records_world_size_batch_accumulate_and_sample_position(references):
    one, two = references
    meta_one, meta_two = checkpoint(one, 3)["meta"], checkpoint(two, 3)["meta"]
    assert {k: meta_one[k] for k in ("world_size", "batch_size", "accumulate", "global_batch")} == \
        {"world_size": 1, "batch_size": 3, "accumulate": 2, "global_batch": 6}
    assert {k: meta_two[k] for k in ("world_size", "batch_size", "accumulate", "global_batch")} == \
        {"world_size": 2, "batch_size": 3, "accumulate": 1, "global_batch": 6}
    # 3 iterations of 6 samples into the first epoch, counted over every rank: the same number
    assert meta_one["samples_in_epoch"] == meta_two["samples_in_epoch"] == 18
    assert (meta_one["batches_in_epoch"], meta_two["batches_in_epoch"]) == (6, 3)  # one rank's batches


def test_a_two_process_run_resumed_on_one_process_keeps_its_global_batch(references, tmp_path):
    one, two = references
    # The command line of the 2-process run (accumulate 1), on 1 process
    result = train(1, tmp_path / "run", "--resume", two / "checkpoints/iter_3.pth", *TWO_PROCESSES)
    assert result.returncode == 0, result.stderr[-3000:]
    assert ("resuming a 2-process run on 1 process: train.accumulate 2 (the config says 1) keeps its global "
            "batch (2 processes x batch 3 x accumulate 1 = 6; now 1 x batch 3 x 2)") in result.stdout
    assert "the recorded states of rank(s) 1 are not used" in result.stdout
    final = checkpoint(tmp_path / "run", 8)
    assert final["meta"]["epoch"] == checkpoint(one, 8)["meta"]["epoch"] == 1  # ends with its second epoch
    assert (final["meta"]["world_size"], final["meta"]["accumulate"], final["meta"]["global_batch"]) == (1, 2, 6)
    assert_same_weights(final["task"], checkpoint(one, 8)["task"])


def test_a_one_process_run_resumed_on_two_processes_keeps_its_global_batch(references, tmp_path):
    one, two = references
    result = train(2, tmp_path / "run", "--resume", one / "checkpoints/iter_3.pth", *ONE_PROCESS)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "train.accumulate 1 (the config says 2) keeps its global batch" in result.stdout
    line = [x for x in result.stdout.splitlines() if "have no recorded random state" in x]
    assert len(line) == 1, result.stdout  # one line, rank 0's
    assert "rank(s) 1 have no recorded random state and start from a fresh seeded one (seed + rank)" in line[0]
    final = checkpoint(tmp_path / "run", 8)
    assert (final["meta"]["world_size"], final["meta"]["accumulate"], final["meta"]["global_batch"]) == (2, 1, 6)
    assert sorted(final["rng"]) == [0, 1]
    assert_same_weights(final["task"], checkpoint(two, 8)["task"])


def test_a_global_batch_that_cannot_be_kept_is_refused_unless_allowed(references, tmp_path):
    _, two = references
    run = tmp_path / "run"
    refused = train(1, run, "--resume", two / "checkpoints/iter_3.pth", *TWO_PROCESSES, "data.train.batch_size=4")
    assert refused.returncode == 2
    assert ("the run's global batch (2 processes x batch 3 x accumulate 1 = 6) cannot be kept on 1 process of "
            "batch 4: 6 is not a multiple of 1 x 4 = 4") in refused.stderr
    assert not (run / "checkpoints").exists()
    shutil.rmtree(run, ignore_errors=True)
    allowed = train(1, run, "--resume", two / "checkpoints/iter_3.pth", *TWO_PROCESSES, "data.train.batch_size=4",
                    "train.max_iters=4", "--allow-new-world-size")
    assert allowed.returncode == 0, allowed.stderr[-3000:]
    assert "the global batch changes from 6 (2 processes x batch 3 x accumulate 1 = 6) to 4" in allowed.stdout
    assert checkpoint(run, 4)["meta"]["global_batch"] == 4


# ----------------------------------------------------------------------------- in process

def state(world_size=2, batch_size=3, accumulate=1, **extra):
    meta = {"world_size": world_size, "batch_size": batch_size, "accumulate": accumulate,
            "global_batch": world_size * batch_size * accumulate, "epoch": 0, "samples_in_epoch": 0, **extra}
    return {"meta": meta}


@pytest.mark.parametrize("world_size, batch, expected", [
    (1, 3, 2), (1, 2, 3), (1, 6, 1), (3, 2, 1), (6, 1, 1),  # 6 = world x batch x accumulate
])
def test_accumulate_keeps_the_global_batch_where_it_divides(world_size, batch, expected):
    assert accumulate_on_resume("c.pth", state(), world_size, batch, accumulate=5) == expected


@pytest.mark.parametrize("world_size, batch", [(1, 4), (4, 3), (5, 1), (1, 12)])
def test_accumulate_that_cannot_keep_the_global_batch_is_refused_or_allowed(world_size, batch):
    with pytest.raises(CheckpointError, match=rf"c.pth: the run's global batch \(2 processes x batch 3 x "
                                              rf"accumulate 1 = 6\) cannot be kept on {world_size} process"):
        accumulate_on_resume("c.pth", state(), world_size, batch, accumulate=5)
    assert accumulate_on_resume("c.pth", state(), world_size, batch, accumulate=5, allow_new_world_size=True) == 5


def test_same_world_size_and_files_without_one_keep_the_configs_accumulate():
    # the same number of processes: the config decides, as before (a batch changed on purpose)
    assert accumulate_on_resume("c.pth", state(world_size=2), 2, batch_size=4, accumulate=5) == 5
    old = {"meta": {"epoch": 0, "batches_in_epoch": 2}}  # files before 0.3.0: the same world size
    assert accumulate_on_resume("c.pth", old, 4, batch_size=1, accumulate=5) == 5


@pytest.mark.parametrize("start", [0, 4, 5, 9, 10, 11])
@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_the_sampler_starts_at_a_sample_of_the_epoch_for_any_world_size(start, world_size):
    """Every rank takes the same number; together they take the epoch's positions from `start`
    on, interleaved, the tail cut to a multiple of the world size."""
    whole = list(EpochSampler(11, seed=4))
    ranks = []
    for rank in range(world_size):
        sampler = EpochSampler(11, seed=4, rank=rank, world_size=world_size)
        sampler.set_start(start)
        ranks.append(list(sampler))
        assert len(sampler) == len(ranks[-1])
    assert len({len(r) for r in ranks}) == 1
    taken = [index for step in zip(*ranks) for index in step]
    assert taken == whole[start:start + len(taken)] and len(whole) - start - len(taken) < world_size


@pytest.mark.parametrize("task_state, what", [
    (False, "random state"), (True, "random state and CycleGANTask state (e.g. an image pool)")])
def test_ranks_without_a_recorded_state_are_named_in_one_line(task_state, what):
    """In one process (rank 0 of 1) reading a file that holds only rank 1's states: rank 0 starts
    afresh, rank 1's are not used; each said once."""
    from framework.engine.resume import log_ranks_without_state

    class Lines(logging.Handler):
        def __init__(self):
            super().__init__(logging.INFO)
            self.lines = []

        def emit(self, record):
            self.lines.append(record.getMessage())

    framework_logger, lines = logging.getLogger("framework"), Lines()
    level = framework_logger.level
    framework_logger.addHandler(lines)
    framework_logger.setLevel(logging.INFO)
    try:
        log_ranks_without_state({"rng": {1: {}}, "meta": {"world_size": 2}}, task_state, "CycleGANTask")
    finally:
        framework_logger.removeHandler(lines)
        framework_logger.setLevel(level)
    assert lines.lines == [
        "resuming a 2-process run on 1 process: the recorded states of rank(s) 1 are not used",
        f"resuming a 2-process run on 1 process: rank(s) 0 have no recorded {what} and start from a fresh "
        "seeded one (seed + rank); rank(s) 1 continue theirs"]
