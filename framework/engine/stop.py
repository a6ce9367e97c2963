"""Graceful stop on SIGTERM / SIGINT / the requeue signal (`dist.requeue_signal`, SIGUSR1 by
default): the training loop finishes its step, saves, and exits.

    with StopSignals() as stop:
        while training:
            step()
            if stop.received: save a checkpoint and leave the loop

A SIGINT after a first stop signal (Ctrl-C twice) raises KeyboardInterrupt at once; a repeated
SIGTERM changes nothing. The handlers are installed only while the loop runs and only from the
main thread, and the previous ones are restored afterwards, so pytest and embedding
applications keep theirs. Forked DataLoader workers inherit the handlers but ignore the
signals: the main process decides when to stop, and shuts its workers down itself.
"""

from __future__ import annotations

import os
import signal
import threading

# SIGUSR1: what Slurm sends before a job's time limit with `--signal=USR1@<seconds>` (SIGTERM
# when it preempts or cancels a job); the exit status is then 128 + 10 = 138. A cluster whose
# job scripts use another signal names it in `dist.requeue_signal` (see `stop_signals`).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


def stop_signals(requeue_signal: str | None = "USR1") -> tuple[signal.Signals, ...]:
    """SIGTERM, SIGINT and the requeue signal named without its SIG prefix (`USR2`); None: none."""
    extra = (signal.Signals[f"SIG{requeue_signal}"],) if requeue_signal else ()
    return (signal.SIGTERM, signal.SIGINT, *extra)


class StopSignals:
    def __init__(self, signals: tuple[signal.Signals, ...] = STOP_SIGNALS):
        self.signals = signals
        self.received: signal.Signals | None = None
        self._previous: dict = {}
        self._owner_pid = os.getpid()

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in self.signals:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame) -> None:
        if os.getpid() != self._owner_pid:  # a forked DataLoader worker
            return
        if self.received is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.received = self.received or signal.Signals(signum)
