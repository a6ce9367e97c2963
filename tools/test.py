"""Evaluate a checkpoint on the config's test data (data.test, else data.val):

    python tools/test.py --config CFG --checkpoint CKPT [--work-dir DIR] [--show-dir DIR] [key=value ...]

Prints a per-class table and the summary, writes <work_dir>/metrics.json, and with
--show-dir saves colour-coded predictions (or generated images) there.
"""

import argparse
import json
import math
from pathlib import Path

from framework.api.runs import run_evaluation
from framework.metrics import is_per_class, json_safe, summary_values
from framework.runtime.cli import exit_process, given_path, output_folder, pause_collector_for_startup, run


def parse_args() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, type=given_path, help="YAML config file")
    parser.add_argument("--checkpoint", required=True, type=given_path, help="checkpoint (.pth) to evaluate")
    parser.add_argument("--work-dir", type=output_folder, help="where metrics.json goes (default: work_dirs/<config name>)")
    parser.add_argument("--show-dir", type=output_folder, help="save visualised predictions here")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    return parser


def format_table(metrics: dict[str, float]) -> str:
    """Per-class metrics (keys like IoU.cat) as rows per class, then the summary line."""
    columns: list[str] = []
    rows: dict[str, dict[str, float]] = {}
    for key, value in metrics.items():
        if is_per_class(key):
            column, name = key.split(".", 1)
            if column not in columns:
                columns.append(column)
            rows.setdefault(name, {})[column] = value
    lines = []
    if rows:
        width = max(len("class"), *(len(n) for n in rows))
        lines.append(f"{'class':<{width}}  " + "  ".join(f"{c:>8}" for c in columns))
        for name, values in rows.items():
            cells = [values.get(c, math.nan) for c in columns]
            lines.append(f"{name:<{width}}  " + "  ".join(f"{v:>8.4f}" for v in cells))
    summary = summary_values(metrics)
    lines.append("  ".join(f"{k} {v:.4f}" for k, v in summary.items()) or "(no metrics configured)")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> None:
    def report(results: dict, state: dict, work_dir: str) -> None:
        print(format_table(results))
        Path(work_dir).mkdir(parents=True, exist_ok=True)
        out = Path(work_dir) / "metrics.json"
        record = {"checkpoint": str(args.checkpoint), "iter": state.get("meta", {}).get("iter"),
                  **json_safe(results)}
        out.write_text(json.dumps(record, indent=2) + "\n")
        print(f"metrics written to {out}")

    run_evaluation(args.config, args.checkpoint, args.overrides, args.work_dir, args.show_dir, on_results=report)


if __name__ == "__main__":
    pause_collector_for_startup()
    exit_process(run(main, parse_args()))
