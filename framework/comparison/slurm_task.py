"""One array task of `tools/compare.py --launcher slurm`: an ordinary tools/train.py run of one pair.

submitit pickles a `TrainTask` per pair and calls it on the node (slurm_launcher.py submits). The
task starts the pair's run as the local runner does (its log, its record, `--resume` when the run
dir holds checkpoints) with the CPUs Slurm gave it (SLURM_CPUS_PER_TASK threads).

Before the time limit Slurm sends SIGUSR1 (`--signal=USR1@<slurm_signal_delay_s>`, set by the
launcher; `scancel --signal=USR1 <job>_<task>.0` does the same by hand). Slurm signals every
process of the step, and the task passes it on if the run has not ended 2 s later: the run
saves a checkpoint and exits 138, then the task asks `scontrol requeue` for itself. Slurm starts
the task again (SLURM_RESTART_COUNT > 0) and it resumes the run from that checkpoint.
submitit's own preemption handler listens to SIGUSR2 and never fires here; this task's handler
replaces nothing else of submitit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from framework.comparison.plan import Pair, Plan

REQUEUE_SIGNAL = signal.SIGUSR1
REQUEUED_NOTE = "stopped by SIGUSR1 before the time limit; requeued"
# Slurm signals every process of the step (proctrack linuxproc, cgroup); where it reaches only the
# task (proctrack/pgid: the run has a session of its own), the task passes the signal on itself
PASS_ON_AFTER_S = 2.0


def task_id() -> str | None:
    """`<array job>_<index>` of this array task (what scontrol requeue and squeue name)."""
    job, index = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{job}_{index}" if job and index else os.environ.get("SLURM_JOB_ID")


class TrainTask:
    """Picklable: the plan, and the command that trains (e.g. [python, tools/train.py])."""

    def __init__(self, plan: Plan, train: list[str]):
        self.plan = plan
        self.train = list(train)

    def __call__(self, pair: Pair) -> str:
        from framework.comparison.runner import outcome_of, start_run

        received: list[int] = []
        signal.signal(REQUEUE_SIGNAL, lambda signum, frame: received.append(signum))
        if pair.state() == "finished":  # a task that ended before its requeue took effect
            return "finished"
        threads = int(os.environ.get("SLURM_CPUS_PER_TASK") or 1)
        process = start_run(self.train, self.plan, pair, pair.state() == "resume", cores=None, threads=threads)
        got_at = None
        while process.poll() is None:
            if received and got_at is None:
                got_at = time.monotonic()
            if got_at is not None and time.monotonic() - got_at > PASS_ON_AFTER_S:
                process.send_signal(REQUEUE_SIGNAL)  # Slurm's signal did not reach it (proctrack/pgid)
                got_at = float("inf")
            time.sleep(0.2)
        if received and process.returncode in (128 + REQUEUE_SIGNAL, -REQUEUE_SIGNAL):
            # -10: a second SIGUSR1 arrived after the run had saved and put its handlers back
            return self._requeue(pair)
        outcome = outcome_of(pair, process.returncode)
        pair.write_record(process.returncode, outcome.error)
        print(f"{pair.name} seed {pair.seed}: {outcome.status}" + (f": {outcome.error}" if outcome.error else ""), flush=True)
        return outcome.status

    def _requeue(self, pair: Pair) -> str:
        returncode = 128 + REQUEUE_SIGNAL
        job = os.environ.get("SLURM_JOB_ID") or task_id()  # this array task's own id
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True)
        if done.returncode != 0:
            why = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
            pair.write_record(returncode, f"stopped by SIGUSR1; scontrol requeue {job} refused: {why[0]}; "
                              "rerun the compare command to submit it again")
            return "stopped"
        pair.write_record(returncode, REQUEUED_NOTE)
        print(f"{pair.name} seed {pair.seed}: {REQUEUED_NOTE} ({job})", flush=True)
        # Slurm ends this attempt now (the requeue cancels the job); leave before it does, without a
        # result for submitit to report as finished
        sys.exit(-1)
