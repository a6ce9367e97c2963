"""What a comparison will run, checked whole before the first run starts.

    plan = make_plan(["a.yaml", "b.yaml"], seeds=[0, 1, 2], overrides=["train.max_iters=300"],
                     metrics=["mIoU"], jobs=2, work_dir="work_dirs/compare")

Every mistake a user can make on the command line (a missing config, a seed given twice, a
metric no config evaluates, more jobs than cores, a folder that holds another command's run)
is one ConfigError line here, so nothing is started for a command that cannot finish.

The folders, under the comparison's work dir, one per pair:
    <name>/seed<S>/        the run's own work dir (tools/train.py --work-dir): checkpoints, metrics.jsonl
    <name>/seed<S>.log     what the run printed
    <name>/seed<S>.json    the run's record: the resolved config's fingerprint and its exit status
where <name> is the config file's name without `.yaml`.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from framework.checkpoint.run_folder import holds_run
from framework.config import import_custom_modules, load_config, parse_override
from framework.errors import ConfigError
from framework.metrics.base import is_per_class, known_result_names
from framework.registry import METRICS, did_you_mean

DIRECTIONS = ("max", "min")


@dataclass(frozen=True)
class Pair:
    """One (config, seed) run and its files."""

    name: str
    config: str
    seed: int
    fingerprint: str  # sha256 of the resolved config: a rerun reuses the folder only for the same run
    folder: Path

    @property
    def run_dir(self) -> Path:
        return self.folder / f"seed{self.seed}"

    @property
    def log_path(self) -> Path:
        return self.folder / f"seed{self.seed}.log"

    @property
    def record_path(self) -> Path:
        return self.folder / f"seed{self.seed}.json"

    def record(self) -> dict | None:
        """The record a previous command left (None: never started)."""
        try:
            return json.loads(self.record_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (ValueError, OSError):  # a record cut short: the run is done again (resumed if it can be)
            return {}

    def write_record(self, returncode: int | None, error: str | None = None) -> None:
        text = json.dumps({"config": self.config, "seed": self.seed, "fingerprint": self.fingerprint,
                           "returncode": returncode, "error": error}, indent=1)
        temp = self.record_path.with_name(self.record_path.name + ".tmp")
        temp.write_text(text + "\n", encoding="utf-8")
        os.replace(temp, self.record_path)

    def state(self) -> str:
        """finished (a run that exited 0), resume (checkpoints to continue from) or new."""
        record = self.record() or {}
        if record.get("returncode") == 0 and record.get("fingerprint") == self.fingerprint:
            return "finished"
        return "resume" if holds_run(self.run_dir) else "new"


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    path: str
    deterministic: bool | str


@dataclass(frozen=True)
class Plan:
    configs: list[ConfigEntry]
    seeds: list[int]
    overrides: list[str]
    metrics: dict[str, str]  # name -> "max" or "min": which end is best
    jobs: int
    threads: int  # per run
    core_sets: list[list[int]]  # the cores of each job slot, disjoint
    work_dir: Path
    pairs: list[Pair]


def available_cores() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def split_cores(cores: list[int], jobs: int) -> list[list[int]]:
    """Disjoint, equal core sets, one per job slot (cores left over stay idle: no run gets more
    threads than another, so their speeds and float reductions match)."""
    if jobs > len(cores):
        raise ConfigError(f"--jobs {jobs}: more runs at once than the {len(cores)} cores this process may use; "
                          f"each run needs a core of its own (give --jobs {len(cores)} or fewer)")
    per_job = len(cores) // jobs
    return [cores[i * per_job:(i + 1) * per_job] for i in range(jobs)]


def parse_metric(text: str) -> tuple[str, str | None]:
    """`mIoU` -> (mIoU, None); `L1:min` -> (L1, min)."""
    name, _, direction = text.rpartition(":") if text.endswith((":max", ":min")) else (text, "", "")
    return name, direction or None


def _known_metric_names(cfg) -> list[str] | None:
    """The values the config's metrics report (None when a custom metric cannot say)."""
    import_custom_modules(cfg)
    nodes = OmegaConf.to_container(cfg.get("metrics") or [])
    return known_result_names([METRICS.build(node, path=f"metrics[{i}]") for i, node in enumerate(nodes)])


def _check_metric(metric: str, known: list[str] | None, path: str) -> None:
    """`metric` must be a value the config's evaluation reports. Per-class names (`IoU.circle`)
    take the evaluation dataset's class names, known only when the run builds it: their family
    (`IoU.`) is checked here, the name itself in the report."""
    if known is None:  # a custom metric that cannot say: the report names what is missing
        return
    family = metric.split(".")[0] + "." if is_per_class(metric) else None
    if metric in known or (family and any(name.startswith(family) for name in known)):
        return
    summary = ", ".join(name for name in known if not is_per_class(name)) or "none: it never evaluates"
    per_class = next((name for name in known if is_per_class(name)), None)
    also = f"; per class e.g. {per_class}" if per_class else ""
    raise ConfigError(f"--metric: '{metric}' is not a metric of {path} (have: {summary}{also})"
                      f"{did_you_mean(metric, [name for name in known if not is_per_class(name)])}")


def _check_overrides(overrides: list[str]) -> None:
    for text in overrides:
        key = parse_override(text)[0].lstrip("+")
        if key in ("seed", "work_dir"):
            option = "--seeds" if key == "seed" else "--work-dir"
            raise ConfigError(f"override '{text}': {key} is set for each run by {option}; remove the override")


def _check_seeds(seeds: list[int]) -> None:
    seen: set[int] = set()
    for seed in seeds:
        if seed in seen:
            raise ConfigError(f"--seeds: {seed} given twice; each seed is one run per config")
        seen.add(seed)


def _config_names(paths: list[str]) -> list[str]:
    names: dict[str, str] = {}
    for path in paths:
        if not Path(path).is_file():
            raise ConfigError(f"--configs: config file not found: {path}")
        name = Path(path).stem
        if name in names:
            same = Path(names[name]).resolve() == Path(path).resolve()
            why = "given twice" if same else f"has the same name as {names[name]}"
            raise ConfigError(f"--configs: {path} {why}; each config needs a name of its own (its file name)")
        names[name] = path
    return list(names)


def _metric_directions(requested: list[str] | None, first_cfg) -> dict[str, str]:
    best_metric, best_mode = first_cfg.train.best_metric, first_cfg.train.best_mode
    if not requested:
        if not best_metric:
            raise ConfigError("--metric: not given, and the first config sets no train.best_metric to "
                              "compare by; name the metric(s), e.g. --metric mIoU (or L1:min where lower is better)")
        requested = [best_metric]
    directions: dict[str, str] = {}
    for text in requested:
        name, direction = parse_metric(text)
        if name in directions:
            raise ConfigError(f"--metric: {name} given twice")
        directions[name] = direction or (best_mode if name == best_metric else "max")
    return directions


def make_plan(configs: list[str], seeds: list[int], overrides: list[str], metrics: list[str] | None,
              jobs: int, work_dir: str | os.PathLike, cores: list[int] | None = None) -> Plan:
    """Check the whole command (see the module docstring) and list its pairs."""
    _check_seeds(seeds)
    _check_overrides(overrides)
    names = _config_names(configs)
    work_dir = Path(work_dir)
    entries, pairs, directions = [], [], None
    for name, path in zip(names, configs):
        resolved = {seed: load_config(path, [*overrides, f"seed={seed}"]) for seed in seeds}
        cfg = resolved[seeds[0]]
        if directions is None:
            directions = _metric_directions(metrics, cfg)
        known = _known_metric_names(cfg)
        evaluates = cfg.train.val_interval > 0 and (cfg.get("data") or {}).get("val") is not None
        for metric in directions:
            _check_metric(metric, known if evaluates else [], path)
        entries.append(ConfigEntry(name, path, cfg.deterministic))
        for seed in seeds:
            text = OmegaConf.to_yaml(resolved[seed], resolve=True)
            pairs.append(Pair(name, path, seed, hashlib.sha256(text.encode()).hexdigest(), work_dir / name))
    for pair in pairs:
        record = pair.record()
        if record and record.get("fingerprint") not in (None, pair.fingerprint):
            raise ConfigError(f"{pair.run_dir}: holds a run of another config or overrides than {pair.config} "
                              f"seed={pair.seed} now gives; use another --work-dir, or delete {pair.folder} to run it again")
    cores = available_cores() if cores is None else cores
    split_cores(cores, jobs)  # more jobs than cores: refused, also where there are fewer runs than either
    jobs = min(jobs, len(pairs))
    core_sets = split_cores(cores, jobs)
    return Plan(entries, list(seeds), list(overrides), directions, jobs, len(core_sets[0]), core_sets, work_dir, pairs)
