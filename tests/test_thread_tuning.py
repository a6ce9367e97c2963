"""Fewer threads while the machine is busy (issue 53, item 2): the probe's decisions on given
iteration times, and a real run whose iterations take the counts the probe plans (a recording
hook reads torch's count before each iteration). Whether fewer threads are faster under load is
measured by benchmarks/release/shared_machine.py, not here: the load of a test machine is not ours to set."""

import pytest
import torch

from framework.engine.hooks.base import Hook
from framework.registry import HOOKS
from framework.runtime.thread_tuning import ThreadProbe
from framework.runtime.threads import usable_cores
from support import REPO, TINY_SEGMENTATION, call_tool


def feed(probe: ThreadProbe, seconds_at: dict[int, float], iterations: range) -> tuple[list[int], list[str]]:
    """Run `iterations` through the probe, each taking seconds_at[its thread count]; the counts the
    iterations ran with, and the lines logged."""
    threads, ran, lines = probe.threads, [], []
    for iteration in iterations:
        ran.append(threads)
        wanted, line = probe.observe(iteration, seconds_at[threads])
        threads = wanted if wanted is not None else threads
        lines += [line] if line else []
    return ran, lines


def test_a_busy_machine_gets_one_thread_and_a_quiet_one_keeps_two():
    busy = ThreadProbe(max_threads=2, first=5, block=4, interval=500)
    ran, lines = feed(busy, {2: 0.30, 1: 0.16}, range(1, 31))
    # iterations 1..5 before the probe; 6..9 at 2, 10..13 at 1, 14..17 at 2, then 1 from 18 on
    assert ran == [2] * 9 + [1] * 4 + [2] * 4 + [1] * 13
    assert lines == ["threads 2 -> 1 (the machine is busy: 0.16 s per iteration against 0.3 s, medians of 4 and 8 "
                     "iterations; next check at iteration 517)"]
    quiet = ThreadProbe(max_threads=2)
    ran, lines = feed(quiet, {2: 0.16, 1: 0.27}, range(1, 31))
    assert ran == [2] * 8 + [1] * 3 + [2] * 19 and lines == []  # the default blocks: 3


def test_the_probe_asks_only_for_changes_and_starts_at_the_current_count():
    probe, asked, threads = ThreadProbe(max_threads=2, first=2, block=2), [], 2
    for iteration in range(1, 10):
        wanted = probe.observe(iteration, {2: 0.30, 1: 0.16}[threads])[0]
        asked.append(wanted)
        threads = wanted or threads
    # after 2: the probe's A block (2, no change), then B (1), then A again (2), then the decision (1)
    assert asked == [None, None, None, 1, None, 2, None, 1, None]


def test_at_the_margin_exactly_the_count_stays():
    probe = ThreadProbe(max_threads=2, margin=0.25)
    assert feed(probe, {2: 1.0, 1: 0.75}, range(1, 31))[1] == []  # 25% faster is not more than 25%


def test_within_the_margin_the_count_stays():
    probe = ThreadProbe(max_threads=2, margin=0.05)
    assert feed(probe, {2: 0.100, 1: 0.096}, range(1, 31))[1] == []  # 4% faster: noise, not load
    probe = ThreadProbe(max_threads=2, margin=0.05)
    assert feed(probe, {2: 0.100, 1: 0.094}, range(1, 31))[1] != []  # 6% faster


def test_the_probe_looks_again_every_interval_and_climbs_back_when_the_load_is_gone():
    probe = ThreadProbe(max_threads=2, first=5, block=2, interval=20)
    ran, lines = feed(probe, {2: 0.30, 1: 0.16}, range(1, 12))  # busy: down to 1 after iteration 11
    assert probe.threads == 1 and probe.next_start == 31 and len(lines) == 1
    ran, lines = feed(probe, {2: 0.10, 1: 0.16}, range(12, 40))  # quiet again: the next probe tries 2
    assert ran[:20] == [1] * 20 and ran[20:22] == [1, 1] and ran[22:24] == [2, 2]
    assert probe.threads == 2 and lines[0].startswith("threads 1 -> 2 (the machine is quieter: 0.1 s")


def test_between_one_and_the_maximum_the_probes_alternate_down_and_up():
    probe = ThreadProbe(max_threads=8, threads=4, first=1, block=1, interval=3)
    tried = []
    for _ in range(4):
        tried.append(probe.neighbour())
        feed(probe, {3: 1.0, 4: 1.0, 5: 1.0}, range(probe.next_start, probe.next_start + 4))
    assert tried == [3, 5, 3, 5] and probe.threads == 4


def test_at_one_thread_the_probe_tries_two_and_at_the_maximum_one_less():
    assert ThreadProbe(max_threads=4, threads=1).neighbour() == 2
    probe = ThreadProbe(max_threads=4, first=1, block=1, interval=3)
    tried = []
    for _ in range(3):  # the count stays at the maximum: every probe tries one less, never more
        tried.append(probe.neighbour())
        feed(probe, {3: 1.0, 4: 1.0}, range(probe.next_start, probe.next_start + 4))
    assert tried == [3, 3, 3] and probe.threads == 4


def test_one_core_never_probes():
    probe = ThreadProbe(max_threads=1)
    assert feed(probe, {1: 0.1}, range(1, 40)) == ([1] * 39, [])


class ThreadCountRecorder(Hook):
    seen: list[int] = []

    def before_iter(self, trainer):
        ThreadCountRecorder.seen.append(torch.get_num_threads())


if "ThreadCountRecorder" not in HOOKS:
    HOOKS.add(ThreadCountRecorder)


# the probe needs 14 iterations; each of them as small as the Quickstart's network allows
SMALLEST = ["train.val_interval=0", "train.ckpt_interval=0", "data.train.batch_size=1", "data.train.dataset.size=16",
            "task.model.base_channels=4", "data.train.dataset.num_samples=20"]


@pytest.mark.skipif(usable_cores()[0] < 2, reason="one usable core: nothing to adapt")
def test_a_run_under_threads_auto_runs_the_probe_iterations_at_the_planned_counts(tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before, ThreadCountRecorder.seen = torch.get_num_threads(), []
    try:
        torch.set_num_threads(1)  # whatever the worker had: `auto` must set it
        result = call_tool("train", "--config", REPO / "configs/segmentation/unet_shapes.yaml", "--work-dir",
                           tmp_path, *TINY_SEGMENTATION, *SMALLEST, "hooks=[{type: ThreadCountRecorder}]")
        assert result.returncode == 0, result.stderr
        log = (tmp_path / "train.log").read_text()
        after_the_run = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    seen, top = ThreadCountRecorder.seen, usable_cores()[0]
    assert len(seen) == 20
    assert seen[:8] == [top] * 8 and seen[8:11] == [top - 1] * 3 and seen[11:14] == [top] * 3
    assert "threads: fewer while the machine is busy (a check at iteration 5" in log
    assert after_the_run == top  # the process gets back the count auto chose


@pytest.mark.parametrize("threads, deterministic, device, environ, adapts", [
    ("auto", False, "cpu", {}, True),
    (2, False, "cpu", {}, False),  # pinned: the user's count stays
    ("auto", True, "cpu", {}, False),  # a count that varies with the load would vary the sums
    ("auto", "warn", "cpu", {}, False),
    ("auto", False, "cpu", {"OMP_NUM_THREADS": "2"}, False),  # the environment pinned it
    ("auto", False, "meta", {}, False),  # not a CPU run (a GPU's threads only feed it)
])
def test_only_a_lone_cpu_run_under_auto_that_need_not_repeat_gets_the_tuner(monkeypatch, threads, deterministic,
                                                                             device, environ, adapts):
    from framework.engine.build import thread_tuner
    from framework.engine.hooks.thread_tuner import ThreadTunerHook

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    hooks = thread_tuner({"threads": threads, "deterministic": deterministic}, torch.device(device))
    assert [type(h) for h in hooks] == ([ThreadTunerHook] if adapts else [])


@pytest.mark.skipif(usable_cores()[0] < 2, reason="one usable core: nothing to adapt")
def test_a_run_ended_in_the_middle_of_a_probe_gives_the_process_its_count_back():
    from types import SimpleNamespace

    from framework.engine.hooks.thread_tuner import ThreadTunerHook

    before, top = torch.get_num_threads(), usable_cores()[0]
    try:
        torch.set_num_threads(top)
        hook, trainer = ThreadTunerHook(top, first=1, block=2), SimpleNamespace(iter=0, iter_time=0.1)
        hook.before_train(trainer)
        for trainer.iter in range(1, 5):  # the probe's A block, then its first iteration at one thread fewer
            hook.after_iter(trainer)
        assert torch.get_num_threads() == top - 1 and hook.probe.probing
        hook.after_train(trainer)
        assert torch.get_num_threads() == top and not hook.probe.probing
    finally:
        torch.set_num_threads(before)
