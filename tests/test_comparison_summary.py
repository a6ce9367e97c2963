"""The comparison's summary and report (framework/comparison/summary.py, report.py) on metrics.jsonl
files written by hand, without training: best against final in each metric's direction, the seeds
higher / lower than the first config counted apart, and runs without a result (a failed run, a
metric never written) (tests/test_compare.py runs the tool)."""

import json
import statistics

import pytest

from framework.comparison.plan import ConfigEntry, Pair, Plan
from framework.comparison.report import to_markdown
from framework.comparison.runner import Outcome
from framework.comparison.summary import summarize, to_json

SEEDS = [0, 1, 2]
# (config, seed) -> {metric: [value at iteration 10, value at iteration 20]}; iteration 0 is worse and
# best everywhere, and no candidate for best. mIoU: higher is better; L1: lower is better.
CURVES = {
    ("a", 0): {"mIoU": [0.6, 0.5], "L1": [0.2, 0.3]},
    ("a", 1): {"mIoU": [0.6, 0.6], "L1": [0.4, 0.25]},
    ("a", 2): {"mIoU": [0.5, 0.55], "L1": [0.1, 0.15]},
    ("b", 0): {"mIoU": [0.52, 0.52], "L1": [0.35, 0.35]},  # final b - a: mIoU +0.02, L1 +0.05
    ("b", 1): {"mIoU": [0.65, 0.65], "L1": [0.2, 0.2]},  # +0.05, -0.05
    ("b", 2): {"mIoU": [0.5, 0.5], "L1": [0.1, 0.1]},  # -0.05, -0.05
}
UNTRAINED = {"mIoU": 0.99, "L1": 0.0}
METRICS = {"mIoU": "max", "L1": "min"}


def summary_of(tmp_path, records: dict, seeds, failed=()) -> dict:
    """summarize() over configs a and b: `records[(config, seed)]` written as that run's
    metrics.jsonl; the pairs in `failed` ended with exit status 1 and wrote nothing."""
    pairs = [Pair(name, f"{name}.yaml", seed, "fingerprint", tmp_path / name) for name in "ab" for seed in seeds]
    plan = Plan([ConfigEntry(name, f"{name}.yaml", True) for name in "ab"], list(seeds), [], METRICS, jobs=1,
                threads=1, core_sets=[[0]], work_dir=tmp_path, pairs=pairs)
    outcomes = []
    for pair in pairs:
        if (pair.name, pair.seed) in failed:
            outcomes.append(Outcome(pair, "failed", "exit status 1"))
            continue
        pair.run_dir.mkdir(parents=True)
        lines = "".join(json.dumps(record) + "\n" for record in records[pair.name, pair.seed])
        (pair.run_dir / "metrics.jsonl").write_text(lines)
        outcomes.append(Outcome(pair, "finished"))
    return summarize(plan, outcomes)


@pytest.fixture
def summary(tmp_path):
    records = {key: [{"iter": 0, **UNTRAINED}] + [{"iter": 10 * (i + 1), **{name: values[name][i] for name in values}}
                                                  for i in range(2)] for key, values in CURVES.items()}
    return summary_of(tmp_path, records, SEEDS)


def test_best_over_final_is_how_much_better_the_best_is_in_the_metrics_direction(summary):
    reference = summary["results"][0]["metrics"]
    # mIoU: best 0.6, 0.6, 0.55 over finals 0.5, 0.6, 0.55; L1: best 0.2, 0.25, 0.1 under finals 0.3, 0.25, 0.15
    miou, l1 = reference["mIoU"]["best_over_final"], reference["L1"]["best_over_final"]
    assert (miou["n"], miou["mean"], miou["min"], miou["max"]) == pytest.approx((3, 0.1 / 3, 0.0, 0.1))
    assert (l1["n"], l1["mean"], l1["min"], l1["max"]) == pytest.approx((3, 0.05, 0.0, 0.1))
    flat = summary["results"][1]["metrics"]
    assert flat["mIoU"]["best_over_final"]["max"] == flat["L1"]["best_over_final"]["max"] == 0.0  # flat curves


def test_the_report_counts_the_seeds_higher_and_lower_than_the_first_config(summary):
    versus = summary["results"][1]["metrics"]
    assert [(versus[key]["paired_vs_first"]["final"]["higher"], versus[key]["paired_vs_first"]["final"]["lower"])
            for key in ("mIoU", "L1")] == [(2, 1), (1, 2)]
    rows = [line for line in to_markdown(summary).splitlines() if line.startswith("| b |")]
    # per metric: the final values' row, the best values' row, best over final's row
    assert rows[0].startswith("| b | 3/3 |") and rows[0].endswith("| 2 / 1 of 3 |"), rows[0]
    assert rows[3].startswith("| b | 3/3 |") and rows[3].endswith("| 1 / 2 of 3 |"), rows[3]
    assert "## mIoU (higher is better)" in to_markdown(summary) and "## L1 (lower is better)" in to_markdown(summary)


def test_runs_without_a_result_are_named_and_left_out_of_the_numbers(tmp_path):
    """a seed 0: best at iteration 1 (the first after 0); a seed 1 wrote no L1 (null, a boolean);
    b seed 0 failed; so a's L1 has one value and b has no seed in common with a for L1."""
    records = {("a", 0): [{"iter": 0, **UNTRAINED}, {"iter": 1, "mIoU": 0.8, "L1": 0.3}, {"iter": 2, "mIoU": 0.6, "L1": 0.2}],
               ("a", 1): [{"iter": 1, "mIoU": 0.5, "L1": None}, {"iter": 2, "mIoU": 0.7, "L1": True}],
               ("b", 1): [{"iter": 1, "mIoU": 0.4, "L1": 0.5}, {"iter": 2, "mIoU": 0.55, "L1": 0.45}]}
    summary = summary_of(tmp_path, records, [0, 1], failed={("b", 0)})
    a, b = summary["results"]
    assert (a["name"], a["config"], a["deterministic"], b["config"]) == ("a", "a.yaml", True, "b.yaml")
    assert a["runs"] == [
        {"seed": 0, "status": "finished", "error": None, "mIoU": {"final": 0.6, "final_iter": 2, "best": 0.8, "best_iter": 1},
         "L1": {"final": 0.2, "final_iter": 2, "best": 0.2, "best_iter": 2}},
        {"seed": 1, "status": "finished", "error": "metrics.jsonl holds no L1",
         "mIoU": {"final": 0.7, "final_iter": 2, "best": 0.7, "best_iter": 2}, "L1": None}]
    assert b["runs"][0] == {"seed": 0, "status": "failed", "error": "exit status 1"}
    assert a["metrics"]["mIoU"]["final"] == {"n": 2, "mean": pytest.approx(0.65), "sd": statistics.stdev([0.6, 0.7]),
                                             "min": 0.6, "max": 0.7}
    assert a["metrics"]["mIoU"]["best"] == {"n": 2, "mean": pytest.approx(0.75), "sd": statistics.stdev([0.8, 0.7]),
                                            "min": 0.7, "max": 0.8}
    assert a["metrics"]["L1"]["final"] == {"n": 1, "mean": 0.2, "sd": None, "min": 0.2, "max": 0.2}
    nothing = {"n": 0, "mean": None, "sd": None, "min": None, "max": None, "higher": 0, "lower": 0}
    assert b["metrics"]["L1"]["paired_vs_first"] == {"final": nothing, "best": nothing}
    best = b["metrics"]["mIoU"]["paired_vs_first"]["best"]  # b's seed 1 against a's: 0.55 - 0.7
    assert (best["n"], best["mean"], best["higher"], best["lower"]) == (1, pytest.approx(-0.15), 0, 1)
    markdown = to_markdown(summary)
    assert "- a seed 1: finished: metrics.jsonl holds no L1\n- b seed 0: failed: exit status 1\n" in markdown
    assert "| b | 1/2 | 0.45 | 0.45..0.45 | - | - | 0 / 0 of 0 |" in markdown


def test_a_run_with_no_metric_names_each_and_the_json_round_trips_without_nan(tmp_path):
    records = {("a", 0): [{"iter": 1, "mIoU": 0.5, "L1": 0.1}], ("b", 0): [{"iter": 1, "loss": 0.3}]}
    summary = summary_of(tmp_path, records, [0])
    assert summary["results"][1]["runs"][0]["error"] == "metrics.jsonl holds no mIoU, L1"
    text = to_json(summary)
    assert text.startswith('{\n "configs": [\n  "a.yaml",\n  "b.yaml"\n ],\n') and text.endswith("\n}\n")  # indent 1
    assert json.loads(text) == summary
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        to_json({"mean": float("nan")})
