"""The comparison's numbers, read from each run's metrics.jsonl (one JSON record per evaluation).

Per config and metric: the final value (the last evaluation) and the best one (the best
evaluation after iteration 0, what `best.pth` would hold) over the seeds, as mean, sample
standard deviation, min and max; the paired difference against the first config, seed by seed
(the same seed gives both configs the same data order and augmentation, so the pairs cancel
what the seed alone moves), with how many seeds are higher and lower; and how much the best
evaluation flatters a run against its last one. Nothing in it depends on when or where the
runs ran (no times, no absolute paths): with `deterministic: true`, a rerun gives the same JSON.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from framework.comparison.plan import Plan
from framework.comparison.runner import Outcome

Curve = list[tuple[int, float]]


def read_curves(metrics_file: Path, names) -> dict[str, Curve]:
    """{name: [(iteration, value), ...]} from a metrics.jsonl; records without the value (an
    early-stopping record, a NaN written as null) are left out."""
    curves: dict[str, Curve] = {name: [] for name in names}
    if not metrics_file.is_file():
        return curves
    for line in metrics_file.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        for name in names:
            value = record.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                curves[name].append((record["iter"], float(value)))
    return curves


def spread(values: list[float]) -> dict:
    """n, mean, sd (sample; None below 2 values), min, max."""
    if not values:
        return {"n": 0, "mean": None, "sd": None, "min": None, "max": None}
    return {"n": len(values), "mean": statistics.fmean(values),
            "sd": statistics.stdev(values) if len(values) > 1 else None, "min": min(values), "max": max(values)}


def final_and_best(curve: Curve, direction: str) -> dict:
    """The last evaluation and the best one; iteration 0 (the untrained network, val_at_start)
    is no candidate for best unless it is all there is, as for train.best_metric."""
    final_iter, final = curve[-1]
    candidates = [point for point in curve if point[0] > 0] or curve
    pick = max if direction == "max" else min
    best_iter, best = pick(candidates, key=lambda point: point[1])
    return {"final": final, "final_iter": final_iter, "best": best, "best_iter": best_iter}


def paired(values: dict[int, float], reference: dict[int, float]) -> dict:
    """Per-seed differences values - reference over the seeds both have."""
    differences = [values[seed] - reference[seed] for seed in values if seed in reference]
    return {**spread(differences), "higher": sum(d > 0 for d in differences), "lower": sum(d < 0 for d in differences)}


def run_dir_curves(plan: Plan, outcomes: list[Outcome]) -> dict[tuple[str, int], dict[str, Curve]]:
    """The curves of every finished run, by (config name, seed)."""
    return {(o.pair.name, o.pair.seed): read_curves(o.pair.run_dir / "metrics.jsonl", plan.metrics)
            for o in outcomes if o.status == "finished"}


def summarize(plan: Plan, outcomes: list[Outcome]) -> dict:
    curves = run_dir_curves(plan, outcomes)
    results = []
    for entry in plan.configs:
        runs = []
        for outcome in (o for o in outcomes if o.pair.name == entry.name):
            run = {"seed": outcome.pair.seed, "status": outcome.status, "error": outcome.error}
            if outcome.status == "finished":
                run_curves = curves[(entry.name, outcome.pair.seed)]
                missing = [name for name in plan.metrics if not run_curves[name]]
                if missing:
                    run["error"] = f"metrics.jsonl holds no {', '.join(missing)}"
                for name, direction in plan.metrics.items():
                    run[name] = final_and_best(run_curves[name], direction) if run_curves[name] else None
            runs.append(run)
        results.append({"name": entry.name, "config": entry.path, "deterministic": entry.deterministic, "runs": runs})
    for result in results:
        result["metrics"] = {name: _metric_summary(result, results[0], name, direction)
                             for name, direction in plan.metrics.items()}
    return {"configs": [entry.path for entry in plan.configs], "seeds": plan.seeds, "overrides": plan.overrides,
            "threads_per_run": plan.threads, "metrics": plan.metrics, "results": results}


def _values(result: dict, name: str, which: str) -> dict[int, float]:
    return {run["seed"]: run[name][which] for run in result["runs"] if run.get(name)}


def _metric_summary(result: dict, reference: dict, name: str, direction: str) -> dict:
    final, best = _values(result, name, "final"), _values(result, name, "best")
    sign = 1 if direction == "max" else -1
    summary = {"final": spread(list(final.values())), "best": spread(list(best.values())),
               # >= 0: how much better than its last evaluation the best one looks
               "best_over_final": spread([sign * (best[seed] - final[seed]) for seed in final])}
    if result is not reference:
        summary["paired_vs_first"] = {"final": paired(final, _values(reference, name, "final")),
                                      "best": paired(best, _values(reference, name, "best"))}
    return summary


def to_json(summary: dict) -> str:
    return json.dumps(summary, indent=1, allow_nan=False) + "\n"
