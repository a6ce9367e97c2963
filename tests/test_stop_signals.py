"""SIGTERM/SIGINT handling of the training loop, in process (the end-to-end stops and resumes
are in test_resume.py)."""

import os
import signal
import time

import pytest

from framework.engine.stop import StopSignals


def deliver(sig):
    os.kill(os.getpid(), sig)
    time.sleep(0.05)  # python runs the handler between bytecodes of the main thread


def test_first_signal_is_kept_a_later_ctrl_c_interrupts_and_handlers_are_restored():
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    with StopSignals() as stop:
        assert stop.received is None
        deliver(signal.SIGTERM)
        assert stop.received == signal.SIGTERM
        deliver(signal.SIGTERM)  # repeated: still a graceful stop
        with pytest.raises(KeyboardInterrupt):
            deliver(signal.SIGINT)
    assert {sig: signal.getsignal(sig) for sig in before} == before
