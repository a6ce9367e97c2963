"""Running a plan's pairs: one training process each, at most `plan.jobs` at a time.

Each process gets the cores of one job slot (its CPU affinity) and as many threads
(OMP_NUM_THREADS, MKL_NUM_THREADS): runs side by side never share a core, and `num_workers: auto`
sizes a run's loader workers against its own cores. A pair whose record says it finished is
skipped; one with checkpoints in its work dir continues with `--resume`; any other starts anew
(tools/train.py moves what a run without checkpoints left aside).

SIGTERM, SIGINT and SIGUSR1 are passed on to the running processes, which save a checkpoint and
exit (tools/train.py); no new one starts, and `run_pairs` returns the signal so the caller can
exit with 128 + it. The processes run in sessions of their own, so a Ctrl-C in the terminal
reaches them once, through here (a second Ctrl-C, passed on too, stops them without saving).
When this process dies without passing anything on (SIGKILL), the kernel sends each run SIGTERM
on Linux (`child_process.py`), so no run is left training alone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import framework
from framework.comparison.child_process import child_setup
from framework.comparison.plan import Pair, Plan

FRAMEWORK_ROOT = Path(framework.__file__).resolve().parents[1]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
# tools/train.py's status after saving on one of them: 128 + the signal (143, 130, 138)
STOPPED_STATUSES = {128 + int(s) for s in STOP_SIGNALS}


@dataclass
class Outcome:
    pair: Pair
    status: str  # finished, failed, stopped, not run
    error: str | None = None


def train_command(train: list[str], plan: Plan, pair: Pair, resume: bool) -> list[str]:
    """`train` (e.g. [python, tools/train.py]) with the pair's config, work dir and seed."""
    command = [*train, "--config", pair.config, "--work-dir", str(pair.run_dir), *plan.overrides, f"seed={pair.seed}"]
    return command + ["--resume"] if resume else command


def error_lines(log_text: str) -> str | None:
    """The `error: ...` lines of a run's last attempt, joined into one line."""
    last_attempt = log_text.rsplit("\n== ", 1)[-1]
    found = [line.removeprefix("error: ").strip() for line in last_attempt.splitlines() if line.startswith("error: ")]
    return "; ".join(found) or None


def outcome_of(pair: Pair, returncode: int, stopping: bool = False) -> Outcome:
    """`stopping`: a stop signal was passed on to the run (one that got it before its own
    handler was set up died of it: stopped too, not failed)."""
    if returncode == 0:
        return Outcome(pair, "finished")
    if returncode in STOPPED_STATUSES or (stopping and returncode < 0):
        name = signal.Signals(returncode - 128 if returncode > 0 else -returncode).name
        return Outcome(pair, "stopped", f"stopped by {name}; rerun to resume it")
    if returncode < 0:
        return Outcome(pair, "failed", f"killed by {signal.Signals(-returncode).name}")
    error = error_lines(pair.log_path.read_text(encoding="utf-8", errors="replace"))
    return Outcome(pair, "failed", error or f"exit status {returncode} (see {pair.log_path})")


class _StopSignals:
    """Signals received while the runs go on, passed on to each process once (see the module docstring)."""

    def __init__(self):
        self.received: list[int] = []
        self._previous: dict[int, object] = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, lambda signum, frame: self.received.append(signum))
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def pass_on(self, process: subprocess.Popen, already: int) -> int:
        for signum in self.received[already:]:
            if process.poll() is None:
                process.send_signal(signum)
        return len(self.received)


def start_run(train: list[str], plan: Plan, pair: Pair, resume: bool, cores: list[int] | None,
              threads: int | None = None) -> subprocess.Popen:
    """The pair's training process, its output appended to the pair's log; pinned to `cores`
    (None: where it is, e.g. a Slurm task's own CPUs) with `threads` threads (default: one per core)."""
    pair.folder.mkdir(parents=True, exist_ok=True)
    pair.write_record(None)  # claims the folder for this config before the run writes anything
    threads = str(threads or len(cores or [1]))
    # the runs import the framework this process imported (a checkout, not another installed copy)
    python_path = os.pathsep.join(filter(None, [str(FRAMEWORK_ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "PYTHONPATH": python_path}
    command = train_command(train, plan, pair, resume)
    with open(pair.log_path, "a", encoding="utf-8") as log:
        log.write(f"\n== {'resume' if resume else 'start'}: {' '.join(command)}\n")
        log.flush()
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, preexec_fn=child_setup(cores), start_new_session=True)


def run_pairs(plan: Plan, train: list[str], say: Callable[[str], None] = print,
              poll_seconds: float = 0.2) -> tuple[list[Outcome], int | None]:
    """Run every pair of `plan` that has not finished; (outcomes in the plan's order, the stop
    signal received or None)."""
    outcomes: dict[Pair, Outcome] = {}
    todo: list[tuple[Pair, bool]] = []
    for pair in sorted(plan.pairs, key=lambda p: plan.seeds.index(p.seed)):  # seed by seed: early results pair up
        state = pair.state()
        if state == "finished":
            outcomes[pair] = Outcome(pair, "finished")
            say(f"{pair.name} seed {pair.seed}: finished earlier, not run again")
        else:
            todo.append((pair, state == "resume"))
    free_slots = list(range(plan.jobs))
    running: dict[subprocess.Popen, tuple[Pair, int, float, int]] = {}  # -> pair, slot, start time, signals passed on
    with _StopSignals() as stop:
        while (todo and not stop.received) or running:
            while todo and free_slots and not stop.received:
                (pair, resume), slot = todo.pop(0), free_slots.pop(0)
                cores = plan.core_sets[slot]
                process = start_run(train, plan, pair, resume, cores)
                running[process] = (pair, slot, time.monotonic(), 0)
                say(f"{pair.name} seed {pair.seed}: {'resumed' if resume else 'started'} "
                    f"({len(cores)} thread{'s' * (len(cores) > 1)}, cores {','.join(map(str, cores))})")
            for process, (pair, slot, started, passed) in list(running.items()):
                running[process] = (pair, slot, started, stop.pass_on(process, passed))
                if process.poll() is None:
                    continue
                del running[process]
                free_slots.append(slot)
                outcome = outcome_of(pair, process.returncode, stopping=bool(stop.received))
                pair.write_record(process.returncode, outcome.error)
                outcomes[pair] = outcome
                took = f" after {time.monotonic() - started:.0f} s"
                say(f"{pair.name} seed {pair.seed}: {outcome.status}{took}" + (f": {outcome.error}" if outcome.error else ""))
            time.sleep(poll_seconds)
        received = stop.received[0] if stop.received else None
    for pair, _ in todo:
        outcomes[pair] = Outcome(pair, "not run", "not started before the stop; rerun to run it")
    return [outcomes[pair] for pair in plan.pairs], received
