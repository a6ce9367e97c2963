"""SIGTERM/SIGINT handling of the training loop, in process (the end-to-end stops and resumes
are in test_resume.py)."""

import os
import signal
import time

import pytest

from framework.engine.stop import StopSignals, stop_signals


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


def test_the_requeue_signal_is_the_one_configured():
    """dist.requeue_signal: USR2 stops the loop as USR1 did; USR1 is then left as it was (not
    taken over); null leaves only SIGTERM and SIGINT."""
    assert stop_signals() == (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
    assert stop_signals(None) == (signal.SIGTERM, signal.SIGINT)
    usr1_before, usr2_before = signal.getsignal(signal.SIGUSR1), signal.getsignal(signal.SIGUSR2)
    with StopSignals(stop_signals("USR2")) as stop:
        assert signal.getsignal(signal.SIGUSR1) is usr1_before
        deliver(signal.SIGUSR2)
        assert stop.received == signal.SIGUSR2
    assert signal.getsignal(signal.SIGUSR2) is usr2_before
