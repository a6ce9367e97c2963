"""Does bfloat16 autocast train as well as float32? Final quality at equal iterations, several
seeds, for the shipped configs. A measurement, not a test: the evidence behind `amp.enabled`'s
default (framework/runtime/precision.py).

    python benchmarks/quality/amp_quality.py                        # every case, seeds 0 1 2 (~1 h on 2 cores)
    python benchmarks/quality/amp_quality.py --cases pix2pix --seeds 0 1

Cases (the shipped configs, with only data paths changed):
- `shapes`: the Quickstart (configs/segmentation/unet_shapes.yaml, 1500 iterations): val mIoU;
- `voc_folder`: the Quickstart's U-Net on a VOC-layout folder of JPEG images and palette PNG masks
  (benchmarks/helpers/folder_data.py, 300 train and 60 val images): val mIoU;
- `pix2pix`: projects/pix2pix/configs/pix2pix_shapes.yaml (150 iterations): val PSNR;
- `cyclegan`: projects/cyclegan/configs/cyclegan_shapes.yaml (600 iterations): val PSNR of A -> B
  against the paired validation images;
- `dcgan`: projects/dcgan/configs/dcgan_shapes.yaml with the sliced Wasserstein distance of its
  samples to the real images (lower is better), when the SWD metric is registered.
Each case runs in float32 (`amp.enabled=false`) and in bfloat16 autocast (`amp.enabled=true
amp.dtype=bfloat16`) for every seed. bf16 "holds" when its mean lies within the float32 runs'
range over the seeds. Prints a table; writes every run's figures to --json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
PRECISIONS = {"float32": ["amp.enabled=false"], "bfloat16": ["amp.enabled=true", "amp.dtype=bfloat16"]}
CLASSES = ["background", "circle", "rectangle", "triangle"]


def voc_folder(root: Path) -> Path:
    from benchmarks.helpers.folder_data import make_voc

    make_voc(root, count=360, size=64)
    names = (root / "ImageSets/Segmentation/train.txt").read_text().split()
    (root / "ImageSets/Segmentation/train.txt").write_text("\n".join(names[:300]) + "\n")
    (root / "ImageSets/Segmentation/val.txt").write_text("\n".join(names[300:]) + "\n")
    return root


def cases(folder: Path) -> dict[str, dict]:
    """name -> config, overrides, the metric and whether higher is better."""
    found = {
        "shapes": {"config": "configs/segmentation/unet_shapes.yaml", "overrides": [], "metric": "mIoU",
                   "higher": True},
        "voc_folder": {"config": "configs/segmentation/unet_shapes.yaml", "metric": "mIoU", "higher": True,
                       "overrides": [f"data.train.dataset={{type: VOCSegmentation, root: {folder / 'voc'}, "
                                     f"classes: {CLASSES}, pipeline: [{{type: HorizontalFlip, p: 0.5}}]}}",
                                     f"data.val.dataset={{type: VOCSegmentation, root: {folder / 'voc'}, "
                                     f"split: val, classes: {CLASSES}}}"]},
        "pix2pix": {"config": "projects/pix2pix/configs/pix2pix_shapes.yaml", "overrides": [], "metric": "PSNR",
                    "higher": True},
        "cyclegan": {"config": "projects/cyclegan/configs/cyclegan_shapes.yaml", "overrides": [], "metric": "PSNR_ab",
                     "higher": True},
    }
    from framework.registry import METRICS

    if "SWD" in METRICS:
        found["dcgan"] = {"config": "projects/dcgan/configs/dcgan_shapes.yaml", "metric": "SWD", "higher": False,
                          "overrides": ["metrics=[{type: SWD}]", "train.val_interval=2000"]}
    return found


def train(case: dict, precision: str, seed: int, work: Path, iters: int | None = None) -> dict:
    command = [sys.executable, str(REPO / "tools/train.py"), "--config", str(REPO / case["config"]),
               "--work-dir", str(work), "device=cpu", f"seed={seed}", "train.progress_bar=false",
               *case["overrides"], *PRECISIONS[precision]]
    if iters:
        command += [f"train.max_iters={iters}", f"train.val_interval={iters}"]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, env=ENV, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    records = [json.loads(line) for line in (work / "metrics.jsonl").read_text().splitlines()]
    final = records[-1]
    times = [float(t) for t in re.findall(r"time (\d+\.\d+)s", result.stdout + result.stderr)]
    return {"seed": seed, "value": final[case["metric"]], "iter": final["iter"],
            "wall_s": time.perf_counter() - start, "iter_s": statistics.median(times) if times else None}


def summarise(case: dict, runs: dict[str, list[dict]]) -> dict:
    values = {p: [r["value"] for r in rs] for p, rs in runs.items()}
    fp32 = values["float32"]
    bf16_mean = statistics.mean(values["bfloat16"])
    return {"float32": fp32, "bfloat16": values["bfloat16"], "float32_range": [min(fp32), max(fp32)],
            "bfloat16_mean": bf16_mean, "holds": min(fp32) <= bf16_mean <= max(fp32)
            or (bf16_mean > max(fp32) if case["higher"] else bf16_mean < min(fp32)),
            "iter_s": {p: statistics.median([r["iter_s"] for r in rs if r["iter_s"]] or [float("nan")])
                       for p, rs in runs.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", help="subset of shapes voc_folder pix2pix cyclegan dcgan")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--iters", type=int, help="train.max_iters for every case (a smoke run; default: the configs')")
    parser.add_argument("--json", default=str(REPO / "work_dirs/benchmarks/amp_quality.json"))
    args = parser.parse_args()
    import torch

    from framework.runtime.precision import cpu_flags, native_bf16

    results = {"date": time.strftime("%Y-%m-%d %H:%M"), "cores": len(os.sched_getaffinity(0)),
               "native_bf16": native_bf16(torch.device("cpu")),
               "cpu_flags": sorted(f for f in cpu_flags() if "bf16" in f or "amx" in f or f == "avx2"),
               "seeds": args.seeds, "cases": {}}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        voc_folder(folder / "voc")
        for name, case in cases(folder).items():
            if args.cases and name not in args.cases:
                continue
            runs = {p: [] for p in PRECISIONS}
            for seed in args.seeds:
                for precision in PRECISIONS:  # alternated: a busy spell hits both
                    runs[precision].append(train(case, precision, seed, folder / f"{name}_{precision}_{seed}", args.iters))
                    print(name, precision, seed, runs[precision][-1], flush=True)
            results["cases"][name] = {"metric": case["metric"], **summarise(case, runs), "runs": runs}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=1))
    print(f"\n{results['date']}  {results['cores']} cores  bf16 native: {results['native_bf16']}  seeds {args.seeds}")
    for name, row in results["cases"].items():
        print(f"{name:11s} {row['metric']:5s} float32 {row['float32_range'][0]:.4f}..{row['float32_range'][1]:.4f}  "
              f"bfloat16 mean {row['bfloat16_mean']:.4f} ({', '.join(f'{v:.4f}' for v in row['bfloat16'])})  "
              f"holds: {row['holds']}  s/iter fp32 {row['iter_s']['float32']:.4f} bf16 {row['iter_s']['bfloat16']:.4f}")
    print(f"written: {args.json}")


if __name__ == "__main__":
    main()
