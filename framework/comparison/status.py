"""Where each run of a comparison stands, for `tools/compare.py --report` (any launcher).

The comparison's command is kept in `<work dir>/compare.json` (configs, seeds, overrides,
metrics) so `--report --work-dir D` rebuilds the same plan; each run's own record
(`<name>/seed<S>.json`, plan.py) says how it ended; a launcher that queues runs elsewhere adds
what its queue says (slurm_launcher.queued_runs: pending, running).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from framework.comparison.plan import Pair, Plan
from framework.comparison.runner import STOPPED_STATUSES, Outcome
from framework.errors import ConfigError

COMMAND_FILE = "compare.json"


def save_command(work_dir: Path, configs: list[str], seeds: list[int], overrides: list[str],
                 metrics: list[str] | None, threads: int) -> None:
    """`threads`: each run's threads, as the report gives them (a Slurm task's cpus_per_task)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"configs": [str(Path(c).resolve()) for c in configs], "seeds": seeds,
                       "overrides": overrides, "metrics": metrics, "threads": threads}, indent=1)
    temp = work_dir / (COMMAND_FILE + ".tmp")
    temp.write_text(text + "\n", encoding="utf-8")
    os.replace(temp, work_dir / COMMAND_FILE)


def load_command(work_dir: Path) -> dict:
    path = work_dir / COMMAND_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"--report: {path} not found: {work_dir} holds no comparison "
                          "(give the --work-dir a compare command used)") from None
    except ValueError as error:
        raise ConfigError(f"--report: {path} is not readable JSON ({error})") from None


def key(pair: Pair) -> str:
    return f"{pair.name}/seed{pair.seed}"


def recorded_outcome(pair: Pair) -> Outcome:
    """What the pair's record says, with nothing queued: finished, failed, stopped or not run."""
    if pair.state() == "finished":
        return Outcome(pair, "finished")
    record = pair.record()
    if record is None:
        return Outcome(pair, "not run", "not started yet")
    returncode = record.get("returncode")
    if returncode is None:
        return Outcome(pair, "not run", "no exit recorded (not started, cancelled or killed); rerun the command to run or resume it")
    if returncode in STOPPED_STATUSES:
        return Outcome(pair, "stopped", record.get("error") or "stopped; rerun the command to resume it")
    return Outcome(pair, "failed", record.get("error") or f"exit status {returncode} (see {pair.log_path})")


def current_outcomes(plan: Plan, queued: dict[str, tuple[str, str]] | None = None) -> list[Outcome]:
    """Every pair's outcome; `queued`: {pair key: (job id, Slurm state)} of the pairs in a queue
    (RUNNING, PENDING, ...): pending, running, or requeued (pending again after a stop)."""
    outcomes = []
    for pair in plan.pairs:
        outcome = recorded_outcome(pair)
        job = (queued or {}).get(key(pair))
        if job and outcome.status != "finished":
            job_id, state = job
            if state == "RUNNING":
                outcome = Outcome(pair, "running", f"running as Slurm job {job_id}")
            elif outcome.status == "stopped":
                outcome = Outcome(pair, "requeued", f"{outcome.error}; {state.lower()} as Slurm job {job_id}")
            else:
                outcome = Outcome(pair, state.lower(), f"{state.lower()} as Slurm job {job_id}")
        outcomes.append(outcome)
    return outcomes


def counts(outcomes: list[Outcome]) -> str:
    """`3 finished, 1 running, 2 pending`"""
    found: dict[str, int] = {}
    for outcome in outcomes:
        found[outcome.status] = found.get(outcome.status, 0) + 1
    return ", ".join(f"{n} {status}" for status, n in found.items())
