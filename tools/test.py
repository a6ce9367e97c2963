"""Evaluate a checkpoint on the config's test data (data.test, else data.val):

    python tools/test.py --config CFG --checkpoint CKPT [--work-dir DIR] [--show-dir DIR] [key=value ...]

Prints a per-class table and the summary, writes <work_dir>/metrics.json, and with
--show-dir saves colour-coded predictions (or generated images) there.
"""

import argparse
import json
import logging
import math
from pathlib import Path

from framework.checkpoint import files as ckpt
from framework.config import default_work_dir, import_custom_modules, load_config, to_plain
from framework.data.loader import build_dataloader
from framework.data.sources import folders_read_by
from framework.engine.build import build_metrics, build_task, select_device
from framework.engine.evaluation import evaluate
from framework.engine.label_map_data import check_label_map_data
from framework.engine.nonfinite import refuse_nonfinite_weights
from framework.errors import ConfigError
from framework.metrics import is_per_class, json_safe, summary_values
from framework.metrics.base import fit_metrics_to_dataset
from framework.runtime.cli import exit_process, pause_collector_for_startup, run, setup_logging, startup_done
from framework.runtime.overwrite import refuse_writing_over_inputs
from framework.runtime.threads import apply_threads, usable_cores


def parse_args() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="YAML config file")
    parser.add_argument("--checkpoint", required=True, help="checkpoint (.pth) to evaluate")
    parser.add_argument("--work-dir", help="where metrics.json goes (default: work_dirs/<config name>)")
    parser.add_argument("--show-dir", help="save visualised predictions here")
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
    cfg = load_config(args.config, args.overrides)
    work_dir = args.work_dir or cfg.work_dir or default_work_dir(args.config)
    import_custom_modules(cfg)
    plain = to_plain(cfg)
    device = select_device(plain["device"])
    section = plain["data"].get("test") or plain["data"].get("val")
    if section is None:
        raise ConfigError("data.test / data.val: the config has no evaluation data")
    state = ckpt.load_checkpoint(args.checkpoint)  # refuses anything but a training checkpoint
    refuse_nonfinite_weights(state["task"], str(args.checkpoint))
    task = build_task(plain, device)
    ckpt.load_task_weights(task, state, args.checkpoint)
    setup_logging(work_dir, "test.log")  # the work dir is only written once the checkpoint fits
    logging.getLogger("framework").info(apply_threads(plain["threads"]))
    section_path = "data.test" if plain["data"].get("test") else "data.val"
    loader = build_dataloader(section, section_path, train=False, device=device, cores=usable_cores()[0])
    check_label_map_data(task, loader, section_path, training=False)  # before --show-dir's first image
    if args.show_dir:  # its pictures are named like the samples: never in a folder the data comes from
        data = [(f"{section_path}.dataset", folder) for folder in folders_read_by(loader.dataset)]
        refuse_writing_over_inputs("--show-dir", args.show_dir, data,
                                   other_reads=[("--config", args.config), ("--checkpoint", args.checkpoint)])
    metrics = build_metrics(plain)
    fit_metrics_to_dataset(metrics, loader.dataset, f"{section_path}.dataset")

    def save(i, batch, outputs):
        if args.show_dir:
            task.save_visuals(batch, outputs, args.show_dir)

    startup_done()
    before = show_dir_files(args.show_dir)
    results = evaluate(task, loader, metrics, device, on_batch=save)
    print(format_table(results))
    Path(work_dir).mkdir(parents=True, exist_ok=True)
    out = Path(work_dir) / "metrics.json"
    record = {"checkpoint": str(args.checkpoint), "iter": state.get("meta", {}).get("iter"),
              **json_safe(results)}
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"metrics written to {out}")
    if args.show_dir and show_dir_files(args.show_dir) == before:  # a task's save_visuals that writes nothing
        raise ConfigError(f"--show-dir {args.show_dir}: {type(task).__name__}'s save_visuals wrote no file there")


def show_dir_files(folder: str | None) -> dict[Path, int]:
    """{file: its modification time} under `folder` (compared before and after: was anything written?)."""
    if not folder or not Path(folder).is_dir():
        return {}
    return {path: path.stat().st_mtime_ns for path in Path(folder).rglob("*") if path.is_file()}


if __name__ == "__main__":
    pause_collector_for_startup()
    exit_process(run(main, parse_args()))
