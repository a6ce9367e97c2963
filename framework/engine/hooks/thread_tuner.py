"""ThreadTunerHook (priority 5): under `threads: auto`, fewer compute threads while the machine
is busy, more again when it is quiet (framework/runtime/thread_tuning.py decides; this applies).

Added by the engine, not the config: on a single CPU process whose thread count `auto` chose. Not
under torchrun (a rank's iteration time includes waiting for the others, so it cannot tell its
own threads' speed), nor with `deterministic` set or `threads: N` / OMP_NUM_THREADS (the count
is the user's), nor on a GPU (its threads only feed the device).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch

from framework.engine.hooks.base import Hook
from framework.runtime.thread_tuning import ThreadProbe

if TYPE_CHECKING:
    from framework.engine.trainer import Trainer

logger = logging.getLogger("framework")


class ThreadTunerHook(Hook):
    priority = 5  # reads the iteration's time before any other hook runs
    first = ThreadProbe.first
    interval = ThreadProbe.interval

    def __init__(self, max_threads: int, **probe_settings):
        self.probe = ThreadProbe(max_threads, **probe_settings)

    def before_train(self, trainer: Trainer) -> None:
        # a resumed run starts counting from its checkpoint's iteration
        self.probe.next_start = trainer.iter + self.probe.first
        self.probe.threads = torch.get_num_threads()

    def after_iter(self, trainer: Trainer) -> None:
        if trainer.iter < self.probe.next_start and not self.probe.probing:
            return  # between probes: one comparison per iteration
        threads, line = self.probe.observe(trainer.iter, trainer.iter_time)
        if threads is not None and threads != torch.get_num_threads():
            torch.set_num_threads(threads)
        if line is not None:
            logger.info(line)

    def after_train(self, trainer: Trainer) -> None:
        # the load-adapted count is this run's: the process (a notebook, a benchmark's next loop)
        # gets back the count `auto` chose, also when the run ended in the middle of a probe
        self.probe.abandon()
        torch.set_num_threads(self.probe.max_threads)
