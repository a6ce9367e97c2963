"""What re-estimating the EMA generator's BatchNorm statistics changes in a run's scores (issue 50).

    python benchmarks/quality/ema_batchnorm_effect.py work_dirs/compare_synthesis3/oasis_textures/seed{0,1,2} \
        work_dirs/compare_synthesis3/spade_textures/seed{0,1,2} --metrics mIoU_fake Diversity

For each run it evaluates the last checkpoint twice with `framework.evaluate` (tools/test.py's
path, on the config's val data, with the run's own config.yaml):
- as saved: the EMA generator's statistics re-estimated on the last training batches
  (framework/tasks/ema_batchnorm.py; the checkpoint holds them);
- as before the fix: the same weights with the EMA's BatchNorm running statistics replaced by the
  live generator's (what `update_ema` copied into it at the last step) and `+task.ema_bn_batches=0`,
  so nothing re-estimates them at evaluation.
Same weights, same val data, same noise: the difference is the statistics alone. Run it from the
folder the configs' relative paths start from (the judge's checkpoint of `SegmenterScore`).
"""

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from framework import evaluate  # noqa: E402

STATISTICS = ("running_mean", "running_var", "num_batches_tracked")


def last_checkpoint(run: Path) -> Path:
    saved = sorted(run.glob("checkpoints/iter_*.pth"), key=lambda p: int(p.stem.split("_")[1]))
    if not saved:
        raise SystemExit(f"{run}: no checkpoints/iter_*.pth")
    return saved[-1]


def logged_at(run: Path, checkpoint: Path) -> dict:
    """The training's own evaluation at the checkpoint's iteration (metrics.jsonl), or {}: the
    re-estimated evaluation here must equal it (the same checkpoint, data and noise)."""
    iteration = int(checkpoint.stem.split("_")[1])
    lines = (run / "metrics.jsonl").read_text().splitlines() if (run / "metrics.jsonl").exists() else []
    return next((r for r in map(json.loads, lines) if r.get("iter") == iteration), {})


def with_live_statistics(checkpoint: Path, out: Path) -> int:
    """A copy of `checkpoint` whose EMA generator keeps the live generator's BatchNorm statistics;
    the number of tensors replaced."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    task, replaced = state["task"], 0
    for key in list(task):
        if key.startswith("ema.generator.") and key.rsplit(".", 1)[1] in STATISTICS:
            task[key] = task[key.removeprefix("ema.")].clone()
            replaced += 1
    torch.save(state, out)
    return replaced


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (config.yaml, checkpoints/)")
    parser.add_argument("--metrics", nargs="+", default=["mIoU_fake", "Diversity"])
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in args.runs:
            checkpoint, config = last_checkpoint(run), str(run / "config.yaml")
            swapped = Path(tmp) / "live_statistics.pth"
            replaced = with_live_statistics(checkpoint, swapped)
            if not replaced:
                raise SystemExit(f"{checkpoint}: its EMA generator has no BatchNorm statistics")
            re_estimated = evaluate(config, str(checkpoint))
            live = evaluate(config, str(swapped), overrides=["+task.ema_bn_batches=0"])
            logged = logged_at(run, checkpoint)
            for metric in args.metrics:
                if metric in logged and logged[metric] != re_estimated[metric]:
                    print(f"warning: {run}: {metric} {re_estimated[metric]} here, {logged[metric]} in the "
                          f"training's metrics.jsonl (another commit's evaluation?)", flush=True)
            row = {"run": str(run), "checkpoint": checkpoint.name, "tensors_replaced": replaced,
                   **{f"{m}_re_estimated": re_estimated[m] for m in args.metrics},
                   **{f"{m}_live_statistics": live[m] for m in args.metrics}}
            rows.append(row)
            print("  ".join([run.as_posix(), checkpoint.name] + [
                f"{m} {re_estimated[m]:.4f} re-estimated, {live[m]:.4f} live statistics" for m in args.metrics]),
                flush=True)
    for metric in args.metrics:
        differences = [r[f"{metric}_re_estimated"] - r[f"{metric}_live_statistics"] for r in rows]
        spread = f" ± {statistics.stdev(differences):.4f}" if len(differences) > 1 else ""
        print(f"{metric}: re-estimated minus live statistics, mean {statistics.mean(differences):+.4f}{spread} "
              f"({min(differences):+.4f}..{max(differences):+.4f}) over {len(rows)} runs")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
