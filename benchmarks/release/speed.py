"""The framework against plain PyTorch scripts, on folder datasets on disk. A measurement, not a test.

    python benchmarks/release/speed.py            # 1000 / 1500 iterations, 3 rounds: over an hour on 2 cores
                                          # (the native column alone took 52 min on an AVX512-BF16 EPYC)
    python benchmarks/release/speed.py --quick    # a few minutes: 100 iterations, 2 rounds
    python benchmarks/release/speed.py --cases pix2pix --rounds 5   # one case only (~20 min)
    python benchmarks/release/speed.py --isa native        # skip the AVX2 column
    python benchmarks/release/speed.py --device cuda --iters 1000 --rounds 2   # on a GPU: training cases only
    python benchmarks/release/speed.py --device cuda --size 256 --images 100   # larger images (a multiple of 64)

1. Training: a segmentation case (UNet 16-64 on a 64x64 VOC-layout folder, JPEG + palette PNG,
   batch 16) and a pix2pix case (U-Net G + PatchGAN D on 64x64 A|B JPEG pairs, batch 8). The
   baseline (benchmarks/plain/*.py) decodes the folder into memory once and loops over
   contiguous NCHW tensors with networks of its own (benchmarks/plain/networks.py: the same
   parameters, output shapes and FLOPs, checked by tests/test_plain_baselines.py); the framework
   runs tools/train.py on the same files with the same batch, optimizer, flips and iterations,
   once with the shipped defaults (`cache: auto`, `num_workers: auto`, `amp.enabled: auto`:
   bfloat16 autocast where the CPU computes it natively, AMX-BF16 or AVX512-BF16, else float32),
   once reading files every step with one worker process, and, where the defaults train in
   bfloat16, once in float32 (`amp.enabled=false`) against the float32 plain script, and the plain
   script itself under bfloat16 autocast (`--bf16`: what bf16 gives a hand-written loop on this
   CPU, so the framework's bf16 figure reads against the hardware's). Every variant runs
   per instruction set: `native`, and `avx2` (ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2,
   what an AVX2-only CPU runs; no bf16 there). The plain script runs a second time with glibc's malloc thresholds
   set in its environment as the framework sets them (`malloc_tuning`), so the table shows what
   that setting alone is worth. Runs alternate, round after round; the table shows medians of
   whole-process wall time, per-iteration time (log windows of 50, the first dropped), the
   process's peak RSS (DataLoader workers not included) and images/s (batch / iteration time).
   Then, per case and column, benchmarks/release/in_process.py: the plain script's loop and the framework's
   Trainer in one process, float32, blocks of 25 iterations alternated (40 pairs; segmentation 20;
   --quick 6 and 3), where the machine's drift hits both alike; its median ratio resolves the few
   percent that whole processes on a shared machine do not.
2. Fixed cost per iteration: benchmarks/release/fixed_cost.py (near-zero-compute networks).
3. Start-up: `import torch`, `import framework`, `import framework.engine.build` (all that
   tools/train.py imports to train), `tools/train.py --help`, a config error, and the Quickstart
   to the end of its first iteration, against a plain script's first step (benchmarks/plain/first_step.py).

On a GPU (`--device cuda`) the training cases run there (the plain scripts copy the decoded folder
to the GPU once and index and flip each batch there, cudnn.benchmark on) with four variants: the plain script in float32 and under
bf16 autocast, the framework's defaults (bf16 autocast on GPUs that support it) and the framework
in float32; the fixed-cost and start-up blocks, CPU measurements, are left out.

Prints one table and writes everything, with the machine's load, to --json. Whole processes on a
shared machine vary by 10-25% run to run; for differences of a few percent,
benchmarks/release/in_process.py times the same two training loops in one process.
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
WINDOW = 50  # iterations per log window (--quick: 20)
CLASSES = ["background", "circle", "rectangle", "triangle"]
CASES = ("segmentation", "pix2pix")
# What the process sees of the CPU per column: `avx2` runs torch's and oneDNN's AVX2 kernels on any x86 CPU.
ISA_ENV = {"native": [], "avx2": ["env", "ATEN_CPU_CAPABILITY=avx2", "ONEDNN_MAX_CPU_ISA=AVX2"]}
FLIPS = [{"type": "HorizontalFlip", "p": 0.5}, {"type": "VerticalFlip", "p": 0.5}]


def run_process(command: list[str]) -> dict:
    """Wall seconds, peak RSS (MB, the process itself: DataLoader workers not included), exit
    status and output of one process."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        process = subprocess.Popen(command, cwd=REPO, env=ENV, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(process.pid, 0)  # reaps it, with its own resource usage
        wall = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        return {"wall": wall, "rss_mb": usage.ru_maxrss / 1024, "stdout": out.read(), "stderr": err.read(),
                "code": process.returncode}


def run_measured(command: list[str]) -> dict:
    result = run_process(command)
    if result["code"] != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result['stderr'][-3000:]}")
    return result


# ----------------------------------------------------------------------------- training cases


def write_configs(folder: Path, voc: Path, pairs: Path, iters: dict, device: str = "cpu") -> dict[str, Path]:
    import yaml

    common_train = {"log_interval": WINDOW, "val_interval": 0, "progress_bar": False}
    segmentation = {
        "_base_": [str(REPO / "configs/_base_/default_runtime.yaml"), str(REPO / "configs/_base_/models/unet.yaml")],
        "device": device,
        "channels_last": False,  # the plain script's NCHW
        "task": {"num_classes": 4, "class_names": CLASSES},
        "optim": {"type": "AdamW", "lr": 3.0e-3, "weight_decay": 1.0e-4},
        "data": {"train": {"dataset": {"type": "VOCSegmentation", "root": str(voc), "classes": CLASSES,
                                       "pipeline": FLIPS},
                           "batch_size": 16, "num_workers": "auto", "cache": "auto"}},  # the defaults, named
        "train": {**common_train, "max_iters": iters["segmentation"], "ckpt_interval": iters["segmentation"]},
    }
    pix2pix = {
        "_base_": [str(REPO / "projects/pix2pix/configs/pix2pix_shapes.yaml")],
        "device": device,
        "data": {"train": {"dataset": {"type": "AlignedPairs", "root": str(pairs), "pipeline": FLIPS},
                           "batch_size": 8, "num_workers": "auto", "cache": "auto"},  # the defaults, named
                 "val": None},
        "metrics": [],
        "optimizers": {"generator": {"scheduler": None}, "discriminator": {"scheduler": None}},
        "train": {**common_train, "max_iters": iters["pix2pix"], "ckpt_interval": iters["pix2pix"],
                  "val_at_start": False, "best_metric": None},
    }
    paths = {}
    for name, config in (("segmentation", segmentation), ("pix2pix", pix2pix)):
        paths[name] = folder / f"{name}.yaml"
        paths[name].write_text(yaml.safe_dump(config, sort_keys=False))
    return paths


def variants(case: str, config: Path, data_root: Path, iters: int, work: Path, isa: str,
             device: str = "cpu") -> dict[str, list[str]]:
    from framework.runtime.precision import cpu_has_native_bf16

    plain = [*ISA_ENV[isa], sys.executable, str(REPO / f"benchmarks/plain/{case}.py"), str(data_root), "--iters", str(iters),
             "--window", str(WINDOW), "--out", str(work / f"plain_{case}.pth"), "--device", device]
    # --overwrite: each round is a new run in the same work dir (the previous one is moved aside)
    train = [*ISA_ENV[isa], sys.executable, str(REPO / "tools/train.py"), "--config", str(config), "--work-dir", str(work / case),
             "--overwrite"]
    if device == "cuda":  # the GPU computes bf16 natively: the defaults train in it
        return {"plain script": plain, "plain script, bf16 autocast": [*plain, "--bf16"],
                "framework, shipped defaults": train, "framework, float32 (amp off)": [*train, "amp.enabled=false"]}
    # The framework sets glibc's malloc thresholds (malloc_tuning); the same plain script with
    # those two settings as environment variables shows how much of a difference that is.
    from framework.runtime.malloc import MMAP_THRESHOLD, TRIM_THRESHOLD

    tuned_env = ["env", f"MALLOC_MMAP_THRESHOLD_={MMAP_THRESHOLD}", f"MALLOC_TRIM_THRESHOLD_={TRIM_THRESHOLD}"]
    commands = {
        "plain script": plain,
        "plain script, malloc tuned": [*tuned_env, *plain],
        "framework, shipped defaults": train,
        "framework, files + 1 worker": [*train, "data.train.cache=null", "data.train.num_workers=1"],
    }
    if isa == "native" and cpu_has_native_bf16():  # the defaults train in bf16 here: float32 too, like for like
        commands["framework, float32 (amp off)"] = [*train, "amp.enabled=false"]
        # what bf16 gives a hand-written loop on this CPU, to read the framework's bf16 figure against
        commands["plain script, bf16 autocast"] = [*plain, "--bf16"]
    return commands


def window_times(variant: str, stdout: str) -> list[float]:
    if variant.startswith("plain script"):
        return json.loads(stdout.strip().splitlines()[-1])["window_times"]
    return [float(t) for t in re.findall(r"time (\d+\.\d+)s", stdout)]


def training_case(case: str, commands: dict[str, list[str]], batch: int, rounds: int) -> dict:
    runs: dict[str, list[dict]] = {name: [] for name in commands}
    for round_ in range(rounds):  # alternated, so a busy spell on the machine hits every variant
        for name, command in commands.items():
            result = run_measured(command)
            times = window_times(name, result["stdout"])
            runs[name].append({"wall": result["wall"], "rss_mb": result["rss_mb"],
                               "iter": statistics.median(times[1:] or times)})
            print(f"{time.strftime('%H:%M:%S')}  {case}, round {round_ + 1}/{rounds}, {name}: "
                  f"{runs[name][-1]['wall']:.1f} s, {runs[name][-1]['iter']:.4f} s/iter", flush=True)
    summary = {}
    for name, results in runs.items():
        iter_time = statistics.median(r["iter"] for r in results)
        summary[name] = {"wall_s": statistics.median(r["wall"] for r in results), "iter_s": iter_time,
                         "rss_mb": statistics.median(r["rss_mb"] for r in results),
                         "images_per_s": batch / iter_time, "runs": results}
    return summary


def in_process(case: str, isa: str, quick: bool, images: int, size: int) -> dict:
    """benchmarks/release/in_process.py: the plain loop and the framework's, float32, blocks alternated in
    one process (segmentation: half the rounds, its iterations take 3-4x longer)."""
    rounds = (6 if quick else 40) // (2 if case == "segmentation" else 1)
    result = run_measured([sys.executable, str(REPO / "benchmarks/release/in_process.py"), "--case", case, "--isa", isa,
                           "--rounds", str(rounds), "--images", str(images), "--size", str(size)])
    return json.loads(result["stdout"].strip().splitlines()[-1])


# ----------------------------------------------------------------------------- start-up


def startup(rounds: int, folder: Path) -> dict:
    bad = folder / "typo.yaml"
    bad.write_text(f"_base_: {REPO / 'configs/segmentation/unet_shapes.yaml'}\ntrian: {{max_iters: 10}}\n")
    python = [sys.executable]
    commands = {
        "import torch": [*python, "-c", "import torch"],
        "import framework": [*python, "-c", "import framework"],
        "import framework.engine.build": [*python, "-c", "import framework.engine.build"],
        "train.py --help": [*python, str(REPO / "tools/train.py"), "--help"],
        "train.py config error": [*python, str(REPO / "tools/train.py"), "--config", str(bad)],
        "Quickstart, 1 iteration": [*python, str(REPO / "tools/train.py"), "--config",
                                    str(REPO / "configs/segmentation/unet_shapes.yaml"), "--work-dir",
                                    str(folder / "quickstart"), "--overwrite", "device=cpu", "train.max_iters=1",
                                    "train.val_interval=0", "train.ckpt_interval=0", "train.progress_bar=false"],
        "plain script, 1 step": [*python, str(REPO / "benchmarks/plain/first_step.py")],
    }
    walls: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, command in commands.items():
            walls[name].append(run_process(command)["wall"])
    result = {name: statistics.median(values) for name, values in walls.items()}
    result["runner over torch"] = result["import framework.engine.build"] - result["import torch"]
    result["Quickstart first iteration after imports"] = (result["Quickstart, 1 iteration"]
                                                          - result["import framework.engine.build"])
    # What every PyTorch script pays between its imports and its first step (torch._dynamo is
    # imported when the first optimizer is built), and what the framework adds to it.
    result["plain script first step after import torch"] = result["plain script, 1 step"] - result["import torch"]
    result["framework over plain to the first step"] = (result["Quickstart first iteration after imports"]
                                                         - result["plain script first step after import torch"])
    return result


# ----------------------------------------------------------------------------- report


def print_table(results: dict) -> None:
    print(f"\n{results['date']}  {results.get('gpu') or 'CPU'}  {results.get('image_size', 64)}px  {results['cores']} cores, threads {results['threads']}  load {results['load_before']} -> {results['load_after']}  "
          f"{results['rounds']} alternated rounds, medians")
    header = f"{'case':24s} {'variant':30s} {'wall s':>8s} {'x plain':>8s} {'s/iter':>8s} {'x plain':>8s} " \
             f"{'images/s':>9s} {'RSS MB':>8s} {'x plain':>8s}"
    print(header)
    for case, rows in results["training"].items():
        plain = rows["plain script"]
        for name, row in rows.items():
            iters = results["iters"][case.split()[0]]
            print(f"{case + ' (' + str(iters) + ')':24s} {name:30s} {row['wall_s']:8.1f} "
                  f"{row['wall_s'] / plain['wall_s']:8.2f} {row['iter_s']:8.4f} {row['iter_s'] / plain['iter_s']:8.2f} "
                  f"{row['images_per_s']:9.1f} {row['rss_mb']:8.0f} {row['rss_mb'] / plain['rss_mb']:8.2f}")
    for case, row in results.get("in_process", {}).items():
        print(f"in one process {case:29s} framework x{row['ratio_median']:.3f} of the plain script per iteration, "
              f"float32 ({row['plain_ms']:.1f} / {row['framework_ms']:.1f} ms; {row['rounds']} pairs of "
              f"{row['block']} iterations, {row['ratio_min']:.2f} to {row['ratio_max']:.2f})")
    for case, row in results.get("fixed_cost", {}).items():
        print(f"fixed cost    {case:30s} hand-written {row['handwritten_ms']:.3f} ms/iter, framework "
              f"{row['framework_ms']:.3f} ms/iter: +{row['overhead_ms']:.3f} ms")
    if "startup" in results:
        print("start-up      " + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in results["startup"].items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100 iterations per case, 2 rounds")
    parser.add_argument("--rounds", type=int, help="alternated rounds (default 3, quick 2)")
    parser.add_argument("--images", type=int, default=300, help="images per generated dataset")
    parser.add_argument("--size", type=int, default=64,
                        help="side of the generated images (a multiple of 64: pix2pix's U-Net halves it 6 times)")
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS for every process (default: torch's, "
                        "one per core); 1 keeps the figures meaningful on a machine other jobs load")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES), help="training cases to run")
    parser.add_argument("--isa", nargs="+", choices=list(ISA_ENV), default=list(ISA_ENV),
                        help="instruction-set columns (avx2: ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="where the training cases run (cuda: training cases only, native column)")
    parser.add_argument("--iters", type=int, help="iterations of each training case (default 1000 / 1500, quick 100)")
    parser.add_argument("--json", default=str(REPO / "work_dirs/benchmarks/speed.json"))
    args = parser.parse_args()
    if args.size < 64 or args.size % 64:
        parser.error(f"--size: a multiple of 64, got {args.size}")
    global WINDOW
    rounds = args.rounds or (2 if args.quick else 3)
    iters = {"segmentation": 100, "pix2pix": 100} if args.quick else {"segmentation": 1000, "pix2pix": 1500}
    if args.iters:
        iters = dict.fromkeys(iters, args.iters)
    isas = ["native"] if args.device == "cuda" else args.isa
    WINDOW = 20 if args.quick else 50
    if args.threads:
        ENV["OMP_NUM_THREADS"] = str(args.threads)
    from benchmarks.helpers.folder_data import make_aligned_pairs, make_voc

    results = {"date": time.strftime("%Y-%m-%d %H:%M"), "device": args.device, "cores": len(os.sched_getaffinity(0)),
               "threads": args.threads or "default", "image_size": args.size,
               "gpu": gpu_name(args.device), "load_before": round(os.getloadavg()[0], 2), "rounds": rounds, "iters": iters, "training": {}}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        voc = make_voc(folder / "voc", args.images, args.size)
        pairs = make_aligned_pairs(folder / "pairs", args.images, args.size)
        configs = write_configs(folder, voc, pairs, iters, args.device)
        for case, root, batch in (("segmentation", voc, 16), ("pix2pix", pairs, 8)):
            if case not in args.cases:
                continue
            for isa in isas:
                commands = variants(case, configs[case], root, iters[case], folder, isa, args.device)
                results["training"][f"{case} {isa}"] = training_case(f"{case} {isa}", commands, batch, rounds)
                if args.device == "cpu":  # the same two loops in one process: small differences resolved
                    figures = in_process(case, isa, args.quick, args.images, args.size)
                    results.setdefault("in_process", {})[f"{case} {isa}"] = figures
        if args.device == "cuda":  # the fixed cost and the start-up are CPU measurements
            return finish(results, args.json)
        fixed = run_measured([sys.executable, str(REPO / "benchmarks/release/fixed_cost.py"),
                              "--steps", "200" if args.quick else "500", "--repeats", str(2 * rounds + 1)])
        results["fixed_cost"] = json.loads(fixed["stdout"].strip().splitlines()[-1])
        results["startup"] = startup(2 * rounds + 1, folder)
    finish(results, args.json)


def gpu_name(device: str) -> str | None:
    if device != "cuda":
        return None
    import torch

    return torch.cuda.get_device_name(0)


def finish(results: dict, json_path: str) -> None:
    results["load_after"] = round(os.getloadavg()[0], 2)
    Path(json_path).parent.mkdir(parents=True, exist_ok=True)
    Path(json_path).write_text(json.dumps(results, indent=1))
    print_table(results)
    print(f"\nwritten: {json_path}")


if __name__ == "__main__":
    main()
