"""`tools/compare.py --launcher slurm`: a plan's pending runs as ONE Slurm job array, through submitit.

    submit(plan, [python, tools/train.py], parse_options(["partition=gpu", "timeout_min=240"]))

Each array task is an ordinary tools/train.py run of one (config, seed) in the shared work dir
(slurm_task.py), with `--signal=USR1@<signal_delay_s>` and `--requeue`: a task that reaches its
time limit saves a checkpoint, is requeued and resumes. The submitting command returns at once:
nothing has to stay alive on the login node.

What is queued is asked of Slurm (`squeue`, the user's jobs), matched against the job ids the
submissions wrote to `<work dir>/slurm_jobs.json`; how a task ended is its run's record
(plan.py). A rerun submits only the runs that are neither finished nor queued. (submitit's own
job watcher asks `sacct`, which needs Slurm's accounting database; `squeue` needs none.)

Options: the `--slurm key=value` list, and/or a YAML file given to --slurm whose `launcher:`
block maps the same keys (the command line wins). Keys are submitit's AutoExecutor parameters
(timeout_min, cpus_per_task, gpus_per_node, mem_gb, nodes, tasks_per_node) and its Slurm ones,
with or without their `slurm_` prefix (partition, array_parallelism, signal_delay_s, qos, ...).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import yaml

from framework.comparison.plan import Plan
from framework.comparison.runner import FRAMEWORK_ROOT
from framework.comparison.status import key
from framework.errors import ConfigError
from framework.registry import did_you_mean

JOBS_FILE = "slurm_jobs.json"
GENERIC = ("timeout_min", "cpus_per_task", "gpus_per_node", "mem_gb", "nodes", "tasks_per_node", "name")
DEFAULTS = {"timeout_min": 60, "cpus_per_task": 1, "slurm_signal_delay_s": 120}


def require_slurm():
    """submitit, imported; or one line saying what is missing."""
    if shutil.which("sbatch") is None:
        raise ConfigError("--launcher slurm: sbatch is not on PATH (no Slurm client on this machine); "
                          "run from a Slurm login node, or use --launcher local or worker")
    try:
        import submitit
    except ImportError:
        raise ConfigError("--launcher slurm: submitit is not installed; pip install -e '.[cluster]' "
                          "(or pip install submitit)") from None
    return submitit


def _read_options_file(path: str) -> dict:
    try:
        loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"--slurm {path}: not a readable YAML file ({error})") from None
    block = loaded.get("launcher") if isinstance(loaded, dict) else None
    if not isinstance(block, dict):
        raise ConfigError(f"--slurm {path}: no `launcher:` block of key: value options in it")
    return block


def parse_options(texts: list[str]) -> dict:
    """AutoExecutor parameters from `key=value` texts and YAML files (see the module docstring)."""
    import submitit

    slurm_keys = submitit.SlurmExecutor._valid_parameters()
    given: dict = {}
    for text in [t for t in texts if "=" not in t] + [t for t in texts if "=" in t]:  # files first
        if "=" not in text:
            given.update(_read_options_file(text))
            continue
        name, _, value = text.partition("=")
        given[name.strip()] = yaml.safe_load(value) if value else None
    options = dict(DEFAULTS)
    for name, value in given.items():
        bare = name.removeprefix("slurm_")
        if name in GENERIC:
            options[name] = value
        elif bare in slurm_keys:
            options[f"slurm_{bare}"] = value
        else:
            raise ConfigError(f"--slurm: unknown option '{name}'{did_you_mean(bare, [*GENERIC, *slurm_keys])} "
                              f"(submitit's AutoExecutor parameters: {', '.join(GENERIC)}, or Slurm ones like partition)")
    if "slurm_time" in options:  # Slurm's own time limit wins; say it once
        options.pop("timeout_min")
    extra = dict(options.pop("slurm_additional_parameters", None) or {})
    delay = options.pop("slurm_signal_delay_s")
    # SIGUSR1 (tools/train.py's requeue signal) instead of submitit's USR2; --requeue: the task may be requeued
    options["slurm_additional_parameters"] = {"signal": f"USR1@{delay}", "requeue": True, **extra}
    return options


def read_jobs(work_dir: Path) -> dict[str, str]:
    """{pair key: array task id} of earlier submissions."""
    try:
        return json.loads((work_dir / JOBS_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except ValueError as error:
        raise ConfigError(f"{work_dir / JOBS_FILE}: not readable JSON ({error}); it lists the Slurm jobs of "
                          "earlier submissions") from None


def _write_jobs(work_dir: Path, jobs: dict[str, str]) -> None:
    temp = work_dir / (JOBS_FILE + ".tmp")
    temp.write_text(json.dumps(jobs, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(temp, work_dir / JOBS_FILE)


def squeue() -> dict[str, str]:
    """{job id: state} of this user's jobs, array tasks one by one (`12_3`: RUNNING)."""
    try:
        done = subprocess.run(["squeue", "--me", "-h", "-r", "-o", "%i|%T"], capture_output=True, text=True)
    except FileNotFoundError:
        raise ConfigError("squeue is not on PATH (no Slurm client on this machine)") from None
    if done.returncode != 0:
        raise ConfigError(f"squeue failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")
    return dict(line.split("|", 1) for line in done.stdout.splitlines() if "|" in line)


def queued_runs(plan: Plan) -> dict[str, tuple[str, str]]:
    """{pair key: (job id, state)} of the plan's runs Slurm still holds."""
    jobs = read_jobs(plan.work_dir)
    if not jobs:
        return {}
    queue = squeue()
    return {name: (job, queue[job]) for name, job in jobs.items() if job in queue}


def _refusal(error: Exception) -> str:
    """sbatch's own words from submitit's error."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    said = [line for line in lines if "error:" in line] or lines[-1:]
    return said[0] if said else type(error).__name__


def submit(plan: Plan, train: list[str], options: dict, say=print) -> list[str]:
    """Submit the runs neither finished nor queued as one array; the task ids (empty: nothing to do)."""
    submitit = require_slurm()
    from framework.comparison.slurm_task import TrainTask

    queued = queued_runs(plan)
    finished = [pair for pair in plan.pairs if pair.state() == "finished"]
    todo = [pair for pair in plan.pairs if pair not in finished and key(pair) not in queued]
    if not todo:
        say(f"nothing to submit: {len(finished)} finished, {len(queued)} queued in Slurm "
            f"({', '.join(sorted({job for job, _ in queued.values()})) or 'none'})")
        return []
    work_existed = plan.work_dir.exists()
    executor = submitit.AutoExecutor(folder=plan.work_dir / ".submitit" / "%j", cluster="slurm")
    # the tasks unpickle and run the framework this process imported (a checkout, not another installed copy)
    setup = [f"export PYTHONPATH={shlex.quote(str(FRAMEWORK_ROOT))}${{PYTHONPATH:+:$PYTHONPATH}}",
             *(options.pop("slurm_setup", None) or [])]
    try:
        executor.update_parameters(**{"name": "compare", "slurm_array_parallelism": len(todo), "slurm_setup": setup,
                                      **options})
    except (NameError, AssertionError, ValueError) as error:
        raise ConfigError(f"--slurm: {_refusal(error)}") from None
    folder = plan.work_dir / ".submitit"
    existed = folder.exists()
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):  # submitit prints sbatch's refusal too: quoted once, below
            jobs = executor.map_array(TrainTask(plan, train), todo)
    except Exception as error:  # submitit wraps sbatch's refusal (e.g. a partition that does not exist)
        # nothing half-written: the submission script of a refused array goes too
        if not work_existed:
            shutil.rmtree(plan.work_dir, ignore_errors=True)
        elif not existed:
            shutil.rmtree(folder, ignore_errors=True)
        raise ConfigError(f"--launcher slurm: sbatch refused the array: {_refusal(error)}") from None
    known = read_jobs(plan.work_dir)
    for pair, job in zip(todo, jobs):
        pair.folder.mkdir(parents=True, exist_ok=True)
        pair.write_record(None)  # claims the folder for this config, as a local run does
        known[key(pair)] = job.job_id
    _write_jobs(plan.work_dir, known)
    array = jobs[0].job_id.split("_")[0]
    skipped = f"; {len(finished)} finished and {len(queued)} queued not submitted again" if finished or queued else ""
    what = f"job array {array} (tasks {jobs[0].job_id}..{jobs[-1].job_id})" if len(jobs) > 1 else f"job {array}"
    say(f"submitted {len(todo)} run{'s' * (len(todo) > 1)} as Slurm {what}{skipped}")
    say(f"follow: squeue -j {array}; the runs' logs: {plan.work_dir}/<config>/seed<S>.log; "
        f"the report so far: python tools/compare.py --report --work-dir {plan.work_dir}")
    return [job.job_id for job in jobs]
