"""`framework.load(...).predict` against tools/infer.py on the same images and checkpoint. A
measurement, not a test: both run the same batch functions (framework/api/model.py), so the API
should take no longer than infer.py's loop (which also writes two PNGs per image).

    python benchmarks/api_predict.py [--num 100] [--size 256] [--batch 4] [--repeats 3] [--run RUN_DIR]

Without --run, a 4-iteration Quickstart run is trained first (the timing does not depend on how
well it segments). infer.py is timed in this process from its own "N images in Xs" line (the loop
only, without start-up); the API from the first image read to the last map, after load().
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
CONFIG = REPO / "configs/segmentation/unet_shapes.yaml"
TINY = ["device=cpu", "train.max_iters=4", "train.val_interval=4", "train.ckpt_interval=4",
        "data.train.dataset.num_samples=8", "data.train.num_workers=0", "data.val.dataset.num_samples=4"]


def infer_seconds(run: Path, images: Path, output: Path, batch: int) -> float:
    import importlib.util

    from framework.runtime.cli import run as run_tool

    spec = importlib.util.spec_from_file_location("infer_tool", REPO / "tools/infer.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = run_tool(tool.main, tool.parse_args(), ["--config", str(run / "config.yaml"), "--checkpoint",
                        str(run / "checkpoints/iter_4.pth"), "--input", str(images), "--output", str(output),
                        "--batch-size", str(batch), "--device", "cpu", "--progress", "off"])
    assert code == 0, out.getvalue()
    return float(re.search(r"images in ([0-9.]+)s", out.getvalue()).group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num", type=int, default=100)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--run", type=Path, help="a run folder with checkpoints/iter_4.pth (default: train one)")
    args = parser.parse_args()
    import framework

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
        model = framework.load(run / "checkpoints/iter_4.pth", device="cpu")
        tool, api = [], []
        for repeat in range(args.repeats):  # alternated: a busy moment hits both alike
            tool.append(infer_seconds(run, tmp / "in", tmp / f"out{repeat}", args.batch))
            start = time.perf_counter()
            model.predict(paths, batch_size=args.batch)
            api.append(time.perf_counter() - start)
    infer_median, api_median = statistics.median(tool), statistics.median(api)
    print(f"{args.num} images of {args.size}x{args.size}, batch {args.batch}, median of {args.repeats}")
    print(f"tools/infer.py loop  {infer_median:.2f} s")
    print(f"Model.predict        {api_median:.2f} s  ({api_median / infer_median:.1%} of infer.py)")


if __name__ == "__main__":
    main()
