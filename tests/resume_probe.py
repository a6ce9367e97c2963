"""A hook for the kill-and-resume tests, imported by training runs through `custom_imports`.

It appends every iteration's loss to a file, exactly (float.hex), with one unbuffered write
per line so a SIGKILL never leaves a half line; `delay` slows iterations down so a test can
interrupt a run near a chosen iteration.
"""

import os
import time

from framework.engine.hooks import Hook
from framework.registry import HOOKS


@HOOKS.register()
class LossRecorderHook(Hook):
    priority = 60  # after every built-in hook, the checkpoint included

    def __init__(self, path: str, delay: float = 0.0):
        self.path = path
        self.delay = delay

    def after_iter(self, trainer) -> None:
        losses = " ".join(f"{k}={float(v).hex()}" for k, v in sorted(trainer.step_logs.items()))
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{trainer.iter} {losses}\n".encode())
        finally:
            os.close(fd)
        time.sleep(self.delay)


def read_losses(path) -> list[tuple[int, str]]:
    """(iteration, losses) per recorded line, in the order written (resumed runs repeat some)."""
    records = []
    for line in open(path, encoding="utf-8").read().splitlines():
        iteration, _, losses = line.partition(" ")
        records.append((int(iteration), losses))
    return records
