"""The comparison's summary and report (framework/comparison/summary.py, report.py) on metrics.jsonl
files written by hand, without training: best against final in each metric's direction, and the
seeds higher / lower than the first config, counted apart (tests/test_compare.py runs the tool)."""

import json

import pytest

from framework.comparison.plan import ConfigEntry, Pair, Plan
from framework.comparison.report import to_markdown
from framework.comparison.runner import Outcome
from framework.comparison.summary import summarize

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


@pytest.fixture
def summary(tmp_path):
    pairs = [Pair(name, f"{name}.yaml", seed, "fingerprint", tmp_path / name) for name in "ab" for seed in SEEDS]
    plan = Plan([ConfigEntry(name, f"{name}.yaml", True) for name in "ab"], SEEDS, [], {"mIoU": "max", "L1": "min"},
                jobs=1, threads=1, core_sets=[[0]], work_dir=tmp_path, pairs=pairs)
    for pair in pairs:
        pair.run_dir.mkdir(parents=True)
        values = CURVES[pair.name, pair.seed]
        records = [{"iter": 0, **UNTRAINED}] + [{"iter": 10 * (i + 1), **{name: values[name][i] for name in values}}
                                                for i in range(2)]
        (pair.run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return summarize(plan, [Outcome(pair, "finished") for pair in pairs])


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
