"""The framework's training loop against the plain script's, in one process: per-iteration time.

Whole processes on a shared 2-core machine differ by 10-25% from one run to the next
(docs/performance.md), too much to settle whether the framework is within 3% of a plain
script. In one process the machine's drift hits both loops alike. Blocks of iterations
alternate between
- the plain script's loop (benchmarks/plain/<case>.py, or synthesis.py `--variant <case>` for
  `oasis` and `spade`: `build` + `training_steps`, its folder decoded into memory, its own
  networks), with the loss read every 50 iterations as its log does;
- the framework's Trainer built from the config benchmarks/release/speed.py runs (`build_trainer` +
  `fit`: the real loader with `cache: auto` and `num_workers: auto`, flips reseeded per sample,
  hooks, the log line and TensorBoard every 50 iterations), in float32 (`amp.enabled=false`)
  unless `--bf16` puts both under bfloat16 autocast; for `oasis` and `spade`,
  configs/synthesis/<case>_textures.yaml reading the texture scenes from a VOC-layout folder
  (`synthesis_config`: no validation, no metrics);
and the median of the rounds' ratios (framework / plain seconds per iteration) is printed, with
their range (`--verbose`: every round).
Start-up and the end of a run are not in these figures (speed.py's start-up block measures
them), nor is anything set per process: glibc's malloc thresholds, which the framework sets
(`malloc_tuning`), apply to both loops here.

    python benchmarks/release/in_process.py --case pix2pix --isa avx2 --block 25 --rounds 40
    python benchmarks/release/in_process.py --case segmentation --bf16
    python benchmarks/release/in_process.py --case oasis      # SPADE G + UNet segmenter D, OASIS's losses, LabelMix, EMA
    python benchmarks/release/in_process.py --case spade      # SPADE G + 2-scale PatchGAN, hinge + feature matching, EMA
    python benchmarks/release/in_process.py --case pix2pix data.train.cache=null   # framework overrides
    python benchmarks/release/in_process.py --case pix2pix amp.enabled=auto   # the shipped precision vs plain float32

`--isa avx2` runs the process with ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 (what an
AVX2-only CPU runs). Prints one JSON line at the end.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
AVX2_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
BATCH = {"segmentation": 16, "pix2pix": 8, "oasis": 8, "spade": 8}
# the plain script of each case and what its `build` takes besides the folder and the device
PLAIN = {"segmentation": ("segmentation", {}), "pix2pix": ("pix2pix", {}),
         "oasis": ("synthesis", {"variant": "oasis"}), "spade": ("synthesis", {"variant": "spade"})}
SYNTHESIS = ("oasis", "spade")


def plain_loop(case: str, root: Path, bf16: bool):
    """The plain script's training steps: a generator, one iteration per item."""
    import importlib.util

    import torch

    sys.path.insert(0, str(REPO / "benchmarks/plain"))  # as the plain scripts run: `from networks import ...`
    name, build_args = PLAIN[case]
    # loaded from its file under a name of its own: no other module called `pix2pix` can stand in for it
    spec = importlib.util.spec_from_file_location(f"plain_{name}", REPO / f"benchmarks/plain/{name}.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    state = script.build(str(root), torch.device("cpu"), **build_args)
    return script.training_steps(*state, BATCH[case], torch.device("cpu"), bf16)


def synthesis_config(folder: Path, case: str, root: Path) -> Path:
    """configs/synthesis/<case>_textures.yaml training on the texture scenes of the VOC-layout
    folder `root` (the plain script's files), without validation or metrics."""
    import yaml

    from benchmarks.release.speed import WINDOW
    from framework.data.textures import TEXTURE_CLASSES

    config = {
        "_base_": [str(REPO / f"configs/synthesis/{case}_textures.yaml")],
        "device": "cpu",
        "data": {"train": {"dataset": {"type": "VOCSegmentation", "root": str(root), "classes": list(TEXTURE_CLASSES)},
                           "batch_size": BATCH[case], "num_workers": "auto", "cache": "auto"},  # the defaults, named
                 "val": None},
        "metrics": [],
        "train": {"log_interval": WINDOW, "val_interval": 0, "progress_bar": False, "max_iters": 10**9,
                  "val_at_start": False, "best_metric": None},
    }
    path = folder / f"{case}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def write_case(case: str, folder: Path, images: int, size: int) -> tuple[Path, Path]:
    """(the framework's config, the plain script's folder) of `case`, written under `folder`."""
    from benchmarks.helpers.folder_data import make_aligned_pairs, make_voc
    from benchmarks.release.speed import write_configs

    if case in SYNTHESIS:
        root = make_voc(folder / "textures", images, size, scenes="textures")
        return synthesis_config(folder, case, root), root
    roots = {"segmentation": make_voc(folder / "voc", images, size),
             "pix2pix": make_aligned_pairs(folder / "pairs", images, size)}
    configs = write_configs(folder, roots["segmentation"], roots["pix2pix"], dict.fromkeys(roots, 10**9))
    return configs[case], roots[case]


def build_quiet_trainer(config: Path, overrides: list[str], work_dir: str):
    """The Trainer tools/train.py would build, its log lines made but not printed, max_iters 0
    (`time_framework` raises it block by block)."""
    import torch

    from framework.config import load_config
    from framework.engine.build import build_trainer
    from framework.runtime.cli import setup_logging

    # the blocks restart fit() again and again, and each start would run the load probe of
    # `threads: auto` (runtime/thread_tuning.py) inside a 10-iteration block: the loops are compared
    # at the process's count, the probe's cost is benchmarks/release/shared_machine.py's to measure
    cfg = load_config(config, [f"threads={torch.get_num_threads()}", *overrides])
    setup_logging(None)
    logging.getLogger("framework").setLevel(logging.WARNING)  # the log lines are made, not printed
    trainer = build_trainer(cfg, work_dir)
    trainer.max_iters = 0
    return trainer


def time_plain(steps, count: int, done: int, window: int) -> tuple[float, int]:
    """Seconds per iteration over the next `count` steps, and how many steps ran."""
    start, ran = time.perf_counter(), 0
    for ran, losses in enumerate(itertools.islice(steps, count), 1):
        if (done + ran) % window == 0:  # the plain script's log: a host sync on its losses
            [loss.item() for loss in (losses if isinstance(losses, tuple) else (losses,))]
    return (time.perf_counter() - start) / count, ran


def time_framework(trainer, count: int) -> float:
    trainer.max_iters += count
    start = time.perf_counter()
    trainer.fit()
    return (time.perf_counter() - start) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", choices=sorted(BATCH), default="pix2pix")
    parser.add_argument("--isa", choices=["native", "avx2"], default="native")
    parser.add_argument("--bf16", action="store_true", help="both loops under bfloat16 autocast")
    parser.add_argument("--block", type=int, default=25, help="iterations per block (short blocks: the machine drifts less within a pair)")
    parser.add_argument("--rounds", type=int, default=40, help="alternated pairs of blocks, after one of warm-up")
    parser.add_argument("--images", type=int, default=300)
    parser.add_argument("--size", type=int, default=64, help="side of the generated images (a multiple of 64)")
    parser.add_argument("--verbose", action="store_true", help="print every round")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of the framework's config")
    args = parser.parse_args()
    if args.isa == "avx2" and any(os.environ.get(k) != v for k, v in AVX2_ENV.items()):
        # read by torch and oneDNN when they load: the process starts again with them set
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **AVX2_ENV})

    import torch

    from benchmarks.release.speed import WINDOW

    precision = ["amp.enabled=true", "amp.dtype=bfloat16"] if args.bf16 else ["amp.enabled=false"]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        config, root = write_case(args.case, folder, args.images, args.size)
        # the work dir's checkpoint at the end of fit: never (max_iters is only reached block by block)
        trainer = build_quiet_trainer(config, [*precision, "train.ckpt_interval=0", *args.overrides],
                                      str(folder / "work"))
        steps = plain_loop(args.case, root, args.bf16)
        _, plain_iters = time_plain(steps, args.block, 0, WINDOW)  # warm-up
        time_framework(trainer, args.block)
        plain, ours = [], []
        for round_ in range(1, args.rounds + 1):
            seconds, ran = time_plain(steps, args.block, plain_iters, WINDOW)
            plain.append(seconds)
            plain_iters += ran
            ours.append(time_framework(trainer, args.block))
            if args.verbose:
                print(f"{time.strftime('%H:%M:%S')}  round {round_}/{args.rounds}: plain {plain[-1] * 1e3:.2f} ms/iter, "
                      f"framework {ours[-1] * 1e3:.2f} ms/iter, x{ours[-1] / plain[-1]:.3f}", flush=True)
    ratios = [o / p for o, p in zip(ours, plain)]
    result = {"case": args.case, "isa": args.isa, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
              "precision": {"plain": "bfloat16" if args.bf16 else "float32",  # the framework's: as it trained
                            "framework": str(trainer.amp_dtype or torch.float32).removeprefix("torch.")},
              "threads": torch.get_num_threads(),
              "block": args.block, "rounds": args.rounds, "overrides": args.overrides,
              "iterations": {"plain": plain_iters, "framework": trainer.iter},  # warm-up included
              "plain_ms": statistics.median(plain) * 1e3, "framework_ms": statistics.median(ours) * 1e3,
              "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}
    print(f"{args.case}, {result['cpu_capability']}: plain ({result['precision']['plain']}) {result['plain_ms']:.2f} ms/iter, "
          f"framework ({result['precision']['framework']}) {result['framework_ms']:.2f} ms/iter; ratio median x{result['ratio_median']:.3f} "
          f"({result['ratio_min']:.3f} to {result['ratio_max']:.3f})")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
