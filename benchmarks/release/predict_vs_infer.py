"""`framework.load(...).predict` against tools/infer.py on the same images and checkpoint, with the
same number of torch threads. A measurement, not a test: both run the same batch functions
(framework/api/file_runs.py calls Model.segment_batch), so the API should take no longer than
infer.py, which also writes two PNGs per image; the target is predict within 5% of infer.py.

    OMP_NUM_THREADS=2 python benchmarks/release/predict_vs_infer.py --threads 2     # 100 images of 256 x 256,
        [--num 100] [--size 256] [--batch 4] [--rounds 5] [--run RUN_DIR]  # 5 rounds (minutes on 2 cores)
    python benchmarks/release/predict_vs_infer.py --num 4 --size 32 --rounds 1      # a smoke run: seconds

Run it on an otherwise idle machine (a busy one moves both columns; the rounds alternate the two so
a busy moment hits both alike, and the medians are reported). Without --run, a 4-iteration Quickstart
run is trained first (the timing does not depend on how well it segments). Two comparisons:
- loop: infer.py's own "N images in Xs" (reading, predicting, writing; after its start-up) against
  `model.predict(paths)` (reading and predicting);
- end to end: infer.py's `main` in this process (config, checkpoint, loop) against `load()` + `predict`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
CONFIG = REPO / "configs/segmentation/unet_shapes.yaml"
TINY = ["device=cpu", "train.max_iters=4", "train.val_interval=4", "train.ckpt_interval=4",
        "data.train.dataset.num_samples=8", "data.train.num_workers=0", "data.val.dataset.num_samples=4"]


def infer_tool():
    import importlib.util

    spec = importlib.util.spec_from_file_location("infer_tool", REPO / "tools/infer.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def time_infer(tool, run: Path, images: Path, output: Path, batch: int) -> tuple[float, float]:
    """(infer.py's loop seconds, as it prints them; its main's seconds, start to end)."""
    from framework.runtime.cli import run as run_tool

    out = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out):
        code = run_tool(tool.main, tool.parse_args(), ["--config", str(run / "config.yaml"), "--checkpoint",
                        str(run / "checkpoints/iter_4.pth"), "--input", str(images), "--output", str(output),
                        "--batch-size", str(batch), "--device", "cpu", "--progress", "off"])
    whole = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"tools/infer.py failed: {out.getvalue()}")
    return float(re.search(r"images in ([0-9.]+)s", out.getvalue()).group(1)), whole


def time_predict(run: Path, paths: list[Path], batch: int) -> tuple[float, float]:
    """(predict's seconds, load + predict's seconds)."""
    import framework

    start = time.perf_counter()
    model = framework.load(run / "checkpoints/iter_4.pth", device="cpu")
    loaded = time.perf_counter()
    model.predict(paths, batch_size=batch)
    end = time.perf_counter()
    return end - loaded, end - start


def table(rows: list[tuple[str, list[float], list[float]]]) -> str:
    lines = [f"{'':12} {'infer.py median s':>18} {'predict median s':>17} {'predict / infer':>16}"]
    for name, infer, predict in rows:
        a, b = statistics.median(infer), statistics.median(predict)
        lines.append(f"{name:12} {a:18.3f} {b:17.3f} {b / a:16.1%}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num", type=int, default=100, help="images")
    parser.add_argument("--size", type=int, default=256, help="their side")
    parser.add_argument("--batch", type=int, default=4, help="--batch-size of both")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds; medians are reported")
    parser.add_argument("--threads", type=int, help="torch threads of both (default: torch's)")
    parser.add_argument("--run", type=Path, help="a run folder with checkpoints/iter_4.pth (default: train one)")
    args = parser.parse_args()
    import torch

    import framework

    if args.threads is not None:
        torch.set_num_threads(args.threads)  # one process: infer.py and predict share it
    tool = infer_tool()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        run = args.run
        if run is None:
            run = tmp / "run"
            framework.train(str(CONFIG), TINY, work_dir=run)
        rng = np.random.default_rng(0)
        (tmp / "in").mkdir()
        paths = [tmp / "in" / f"{i:04d}.png" for i in range(args.num)]
        for path in paths:
            cv2.imwrite(str(path), rng.integers(0, 256, (args.size, args.size, 3), dtype=np.uint8))
        timings = {"infer_loop": [], "infer_main": [], "predict": [], "load_predict": []}
        for round_ in range(args.rounds):  # alternated: a busy moment hits both alike
            loop, whole = time_infer(tool, run, tmp / "in", tmp / f"out{round_}", args.batch)
            predict, with_load = time_predict(run, paths, args.batch)
            for key, value in zip(timings, (loop, whole, predict, with_load)):
                timings[key].append(value)
    print(f"{args.num} images of {args.size} x {args.size}, batch {args.batch}, {torch.get_num_threads()} torch "
          f"threads, medians of {args.rounds} rounds")
    print(table([("loop", timings["infer_loop"], timings["predict"]),
                 ("end to end", timings["infer_main"], timings["load_predict"])]))


if __name__ == "__main__":
    main()
