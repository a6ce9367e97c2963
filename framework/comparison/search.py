"""tools/search.py: a hyperparameter search on Optuna, each trial an ordinary tools/train.py run.

    <work dir>/study.journal      Optuna's JournalStorage file: processes on machines sharing the
                                  work dir that run the same command join the same study
    <work dir>/trial_<N>/         trial N's run dir; trial_<N>.log what it printed
    <work dir>/best.yaml          the best trial's values as a config that trains on its own
    <work dir>/trials.md          every trial: state, values, objective
    <work dir>/optimization_history.png, param_importances.png   Optuna's own plots (matplotlib)

The sampler is TPE with `seed`; the objective is the run's best value of the config's
`train.best_metric` (the best evaluation after iteration 0, as best.pth keeps it) in its
`best_mode` direction. Each run reports its evaluations to its trial (an OptunaPruningHook added
to the config's hooks, framework/engine/hooks/pruning.py); with the median pruner a trial below
the median of earlier trials at the same iteration stops there, with its checkpoint, and is
marked pruned. The study remembers its space (a study attribute): a search with another
space on the same study file is refused, naming both. A trial whose run fails is a failed trial
with the run's error line; the others go on. A trial left running in the journal by a search
that was preempted or killed (its run got SIGTERM and saved a checkpoint) is retried by the next
search command on that host: marked failed and enqueued with the same values, resuming its run.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import warnings
from pathlib import Path

import yaml

from framework.checkpoint.files import process_alive
from framework.checkpoint.run_folder import holds_run
from framework.comparison.child_process import child_setup
from framework.comparison.runner import FRAMEWORK_ROOT, error_lines
from framework.comparison.search_space import as_override, canonical, suggest
from framework.comparison.summary import final_and_best, read_curves
from framework.errors import ConfigError

STUDY_NAME = "search"


def require_optuna():
    try:
        import optuna
    except ImportError:
        raise ConfigError("tools/search.py needs optuna: pip install -e '.[cluster]' (or pip install optuna)") from None
    return optuna


def open_study(work_dir: Path, space: dict, space_path: str, config: str, direction: str, seed: int):
    optuna = require_optuna()
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    work_dir.mkdir(parents=True, exist_ok=True)
    journal = work_dir / "study.journal"
    storage = JournalStorage(JournalFileBackend(str(journal)))
    sampler = optuna.samplers.TPESampler(seed=seed)
    # no pruner here: each trial's run decides with its own (the OptunaPruningHook's make_pruner)
    pruner_object = optuna.pruners.NopPruner()
    try:  # loading writes nothing to the journal (a refused search leaves it as it was)
        study = optuna.load_study(study_name=STUDY_NAME, storage=storage, sampler=sampler, pruner=pruner_object)
    except KeyError:
        try:
            study = optuna.create_study(study_name=STUDY_NAME, storage=storage, sampler=sampler, pruner=pruner_object,
                                        direction="maximize" if direction == "max" else "minimize")
        except optuna.exceptions.DuplicatedStudyError:  # another process created it just now
            study = optuna.load_study(study_name=STUDY_NAME, storage=storage, sampler=sampler, pruner=pruner_object)
    attrs = study.user_attrs
    if not attrs:
        study.set_user_attr("space", canonical(space))
        study.set_user_attr("space_file", str(Path(space_path).resolve()))
        study.set_user_attr("config", str(Path(config).resolve()))
    elif attrs.get("space") != canonical(space) or attrs.get("config") != str(Path(config).resolve()):
        raise ConfigError(f"{journal}: this study searches {attrs.get('config')} over the space of "
                          f"{attrs.get('space_file')}; {config} with {space_path} is another search: use another --work-dir")
    return study


def optuna_module():
    import optuna

    return optuna


class TrialFailed(Exception):
    """A trial's run failed (exit status != 0, or no value of the metric): the trial fails, the search goes on."""


def _run_is_gone(run_dir: Path) -> bool:
    """The run saved checkpoints and no live process holds its folder (its `.lock`, written by
    tools/train.py: pid and host, removed when the run ends). A lock of another host cannot be
    judged from here: such a trial is left alone."""
    if not holds_run(run_dir):
        return False
    try:
        owner = json.loads((run_dir / ".lock").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return True
    except (OSError, ValueError):
        return False
    return owner.get("host") == socket.gethostname() and not process_alive(int(owner.get("pid", 0)))


def retry_stopped_trials(study, work_dir: Path, say) -> int:
    """Trials the journal still calls running whose run is gone (the search was preempted or
    killed: its runs got SIGTERM and saved): each marked failed and enqueued again with the same
    values, to resume in the same run dir. How many."""
    optuna = optuna_module()
    retried = 0
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        number = trial.user_attrs.get("retry_of", trial.number)
        if not _run_is_gone(work_dir / f"trial_{number}"):
            continue
        study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
        study.enqueue_trial(trial.params, user_attrs={"retry_of": number})
        say(f"trial {trial.number}: its run stopped before the end (preempted or killed); "
            f"retried from its checkpoint in trial_{number}/")
        retried += 1
    return retried


def pruning_override(hooks: list, work_dir: Path, trial, metric: str, pruner: str, startup_trials: int) -> str:
    """`hooks=[...]`: the config's own hooks and the OptunaPruningHook of this trial (JSON is YAML)."""
    hook = {"type": "OptunaPruningHook", "storage": str((work_dir / "study.journal").resolve()), "study": STUDY_NAME,
            "trial_id": trial._trial_id, "monitor": metric, "pruner": pruner, "startup_trials": startup_trials}
    return "hooks=" + json.dumps([*hooks, hook])


def pruned_at(run_dir: Path) -> dict | None:
    """The `pruned` record the OptunaPruningHook wrote, if it pruned the run."""
    path = run_dir / "metrics.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    return next((json.loads(line)["pruned"] for line in reversed(lines) if '"pruned"' in line), None)


def make_objective(config: str, overrides: list[str], space: dict, metric: str, direction: str,
                   work_dir: Path, train: list[str], threads: int, say, hooks: list, pruner: str, startup_trials: int):
    def objective(trial) -> float:
        values = suggest(trial, space)
        retried = trial.user_attrs.get("retry_of")  # a stopped trial's run, resumed from its checkpoint
        name = f"trial_{retried if retried is not None else trial.number}"
        run_dir, log_path = work_dir / name, work_dir / f"{name}.log"
        command = [*train, "--config", config, "--work-dir", str(run_dir), *overrides,
                   *(as_override(key, value) for key, value in values.items()), *(["--resume"] if retried is not None else [])]
        if pruner != "none":
            command.append(pruning_override(hooks, work_dir, trial, metric, pruner, startup_trials))
        python_path = os.pathsep.join(filter(None, [str(FRAMEWORK_ROOT), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "PYTHONPATH": python_path}
        say(f"trial {trial.number}: {' '.join(as_override(k, v) for k, v in values.items())}")
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(f"\n== start: {' '.join(command)}\n")
            log.flush()
            # as compare's runs: SIGTERM from the kernel when this process dies (the run saves and ends)
            done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                  preexec_fn=child_setup(None))
        if done.returncode != 0:
            error = error_lines(log_path.read_text(encoding="utf-8", errors="replace"))
            trial.set_user_attr("error", error or f"exit status {done.returncode} (see {log_path})")
            say(f"trial {trial.number}: failed: {trial.user_attrs['error']}")
            raise TrialFailed(trial.user_attrs["error"])
        pruned = pruned_at(run_dir)
        if pruned is not None:
            trial.set_user_attr("error", f"pruned at iteration {pruned['iter']}")
            say(f"trial {trial.number}: pruned at iteration {pruned['iter']} ({metric} {pruned['value']})")
            raise optuna_module().TrialPruned(f"pruned at iteration {pruned['iter']}")
        curve = read_curves(run_dir / "metrics.jsonl", [metric])[metric]
        if not curve:
            trial.set_user_attr("error", f"metrics.jsonl holds no {metric}")
            raise TrialFailed(trial.user_attrs["error"])
        best = final_and_best(curve, direction)["best"]
        say(f"trial {trial.number}: {metric} {best:.4g}")
        return best

    return objective


def write_best_config(study, config: str, overrides: list[str], path: Path) -> Path | None:
    """`_base_: [config]` with the command's overrides and the best trial's values: trains on its own."""
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    if not complete:
        return None
    tree: dict = {"_base_": [str(Path(config).resolve())]}
    for text in [*overrides, *(as_override(k, v) for k, v in study.best_trial.params.items())]:
        key, _, value = text.partition("=")
        node = tree
        *parents, last = key.lstrip("+").split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = yaml.safe_load(value)
    header = f"# tools/search.py: trial {study.best_trial.number} of {len(study.trials)}, {study.best_value:.6g}\n"
    path.write_text(header + yaml.safe_dump(tree, sort_keys=False), encoding="utf-8")
    return path


def trials_table(study, metric: str) -> str:
    """Every trial: state, values, objective, its wall time; then what pruning saved (the pruned
    trials' mean time against the finished ones')."""
    keys = sorted({key for trial in study.trials for key in trial.params})
    lines = ["| trial | state | " + " | ".join(keys) + f" | {metric} | seconds |", "| --- " * (len(keys) + 4) + "|"]
    for trial in study.trials:
        value = f"{trial.value:.4g}" if trial.value is not None else trial.user_attrs.get("error", "-")
        params = [f"{trial.params[k]:.4g}" if isinstance(trial.params.get(k), float) else str(trial.params.get(k, "-"))
                  for k in keys]
        seconds = f"{trial.duration.total_seconds():.0f}" if trial.duration is not None else "-"
        lines.append(f"| {trial.number} | {trial.state.name.lower()} | " + " | ".join(params) + f" | {value} | {seconds} |")
    return "\n".join(lines) + "\n" + pruning_cost(study)


def pruning_cost(study) -> str:
    """'pruned trials: N, each on average X of a finished trial's time (A s against B s)', or ''."""
    def mean_seconds(state: str) -> float | None:
        times = [t.duration.total_seconds() for t in study.trials if t.state.name == state and t.duration is not None]
        return sum(times) / len(times) if times else None

    pruned, complete = mean_seconds("PRUNED"), mean_seconds("COMPLETE")
    if pruned is None or not complete:
        return ""
    count = sum(t.state.name == "PRUNED" for t in study.trials)
    return (f"\npruned trials: {count}, each on average {pruned / complete:.2f} of a finished trial's time "
            f"({pruned:.0f} s against {complete:.0f} s)\n")


def write_plots(study, work_dir: Path) -> list[Path]:
    """Optuna's optimization history and parameter importances (the latter from 2 finished trials)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as optuna_plots

    written = []
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    plots = [("optimization_history.png", optuna_plots.plot_optimization_history, 1),
             ("param_importances.png", optuna_plots.plot_param_importances, 2)]
    for name, plot, needed in plots:
        if len(complete) < needed:
            continue
        with warnings.catch_warnings():  # "experimental" since Optuna 2.2: said once here, not on every run
            warnings.simplefilter("ignore")
            axes = plot(study)
        axes.figure.savefig(work_dir / name, dpi=100, bbox_inches="tight")
        plt.close(axes.figure)
        written.append(work_dir / name)
    return written
