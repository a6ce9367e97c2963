"""The summary (summary.py) as markdown: per metric, the final and the best values of each
config, the paired differences against the first config, and best against last."""

from __future__ import annotations


def number(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.4g}" if signed else f"{value:.4g}"


def mean_sd(spread: dict, signed: bool = False) -> str:
    if not spread["n"]:
        return "-"
    sd = f" ± {number(spread['sd'])}" if spread["sd"] is not None else ""
    return number(spread["mean"], signed) + sd


def min_max(spread: dict, signed: bool = False) -> str:
    return f"{number(spread['min'], signed)}..{number(spread['max'], signed)}" if spread["n"] else "-"


def _value_table(summary: dict, name: str, which: str) -> list[str]:
    first = summary["results"][0]["name"]
    lines = [f"| config | runs | mean ± sd | min..max | minus {first}, seed by seed: mean ± sd | min..max | seeds higher / lower |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for result in summary["results"]:
        values = result["metrics"][name][which]
        runs = f"{values['n']}/{len(result['runs'])}"
        versus = result["metrics"][name].get("paired_vs_first")
        if versus is None:
            compared = ["(reference)", "", ""]
        else:
            difference = versus[which]
            compared = [mean_sd(difference, signed=True), min_max(difference, signed=True),
                        f"{difference['higher']} / {difference['lower']} of {difference['n']}"]
        lines.append("| " + " | ".join([result["name"], runs, mean_sd(values), min_max(values), *compared]) + " |")
    return lines


def _flattery_table(summary: dict, name: str) -> list[str]:
    lines = ["| config | mean ± sd | min..max |", "| --- | --- | --- |"]
    for result in summary["results"]:
        flattery = result["metrics"][name]["best_over_final"]
        lines.append(f"| {result['name']} | {mean_sd(flattery)} | {min_max(flattery)} |")
    return lines


def to_markdown(summary: dict) -> str:
    seeds = ", ".join(map(str, summary["seeds"]))
    overrides = " ".join(summary["overrides"]) or "none"
    lines = ["# Comparison", "",
             f"Configs: {', '.join(summary['configs'])}; seeds {seeds}; overrides: {overrides}; "
             f"{summary['threads_per_run']} thread(s) per run.", ""]
    unsure = [r["name"] for r in summary["results"] if r["deterministic"] is not True]
    if unsure:
        lines += [f"Not `deterministic: true`: {', '.join(unsure)} (a rerun may differ in the last digits).", ""]
    for name, direction in summary["metrics"].items():
        better = "higher" if direction == "max" else "lower"
        lines += [f"## {name} ({better} is better)", "", "Final value (the last evaluation):", "",
                  *_value_table(summary, name, "final"), "",
                  "Best value (the best evaluation after iteration 0; what best.pth keeps when this is train.best_metric):", "",
                  *_value_table(summary, name, "best"), "",
                  "How much the best evaluation flatters a run (best against final, per run; 0: the last was the best):",
                  "", *_flattery_table(summary, name), ""]
    problems = [(r["name"], run) for r in summary["results"] for run in r["runs"] if run["error"]]
    if problems:
        lines += ["## Runs without a result", ""]
        lines += [f"- {name} seed {run['seed']}: {run['status']}: {run['error']}" for name, run in problems]
        lines.append("")
    return "\n".join(lines)


def write_report(plan, outcomes) -> tuple[dict, list]:
    """summary.json, summary.md and one curves PNG per metric in the comparison's work dir;
    (the summary, the files written)."""
    from framework.comparison.plot import plot_curves, plot_file_name
    from framework.comparison.summary import run_dir_curves, summarize, to_json

    summary = summarize(plan, outcomes)
    written = [plan.work_dir / "summary.json", plan.work_dir / "summary.md"]
    plan.work_dir.mkdir(parents=True, exist_ok=True)
    written[0].write_text(to_json(summary), encoding="utf-8")
    written[1].write_text(to_markdown(summary), encoding="utf-8")
    curves = run_dir_curves(plan, outcomes)
    for metric, direction in plan.metrics.items():
        by_config = {entry.name: [curves[(entry.name, seed)][metric] for seed in plan.seeds
                                  if curves.get((entry.name, seed), {}).get(metric)] for entry in plan.configs}
        written.append(plot_curves(metric, direction, by_config, plan.work_dir / plot_file_name(metric)))
    return summary, written
