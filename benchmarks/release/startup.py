"""Start-up against plain PyTorch, per CPU kind: medians of several process starts.

    python benchmarks/release/startup.py                   # native and avx2 columns, 7 rounds
    python benchmarks/release/startup.py --isa avx2 --rounds 11 --json startup.json
    python benchmarks/release/startup.py --modules         # also: which packages the Quickstart loads (deterministic)

Per column (`native`; `avx2`: ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2, what an AVX2-only CPU
runs), processes alternate round after round:
- `import torch`; `import framework.engine.build` (all tools/train.py imports to train);
- the Quickstart (configs/segmentation/unet_shapes.yaml) to the end of its first iteration
  (`train.max_iters=1`, no evaluation or checkpoint; `cache: auto` as shipped);
- a plain script to the end of its first step (benchmarks/plain/first_step.py).

Goals (issue 43), each printed with `meets`: the framework's import at most 0.3 s over torch's
(`import over torch`), and the Quickstart's first iteration at most 1.0 s after the plain
script's first step (`first iteration after plain`: whole processes, both from a cold start).
Whole-process times on a loaded machine vary by 10-25%: run it on a quiet one.

`--modules`: the top-level packages a Quickstart run has loaded at its end, per column, and those
of them the run does not use (tests/test_startup.py asserts the same list is empty): evidence that
does not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.release.speed import ENV, ISA_ENV, run_process  # noqa: E402

# What a Quickstart run (albumentations flips, TensorBoard) does not use, with what pulled each in:
# albumentations' Hub mixin (huggingface_hub, its HTTP stack), TensorBoard's S3 file system (boto3),
# and what only other configs, tools or loggers use.
UNUSED = {"huggingface_hub", "httpx", "httpx2", "httpcore", "httpcore2", "trio", "anyio", "boto3", "botocore",
          "s3transfer", "timm", "torchvision", "mlflow", "onnx", "onnxruntime", "safetensors", "torchmetrics",
          "matplotlib", "pandas"}
GOALS_S = {"import over torch": 0.3, "first iteration after plain": 1.0}
QUICKSTART = ["--config", str(REPO / "configs/segmentation/unet_shapes.yaml"), "device=cpu", "train.max_iters=1",
              "train.val_interval=0", "train.ckpt_interval=0", "train.progress_bar=false"]
MODULES_PROBE = """
import json, runpy, sys
sys.argv = ["train.py", *{args!r}]
try:
    runpy.run_path({train!r}, run_name="__main__")
except SystemExit as exit:
    assert not exit.code, exit.code
print(json.dumps(sorted({{name.split(".")[0] for name in sys.modules}})))
"""


def commands(isa: str, folder: Path) -> dict[str, list[str]]:
    python = [*ISA_ENV[isa], sys.executable]
    return {"import torch": [*python, "-c", "import torch"],
            "import framework.engine.build": [*python, "-c", "import framework.engine.build"],
            "Quickstart, 1 iteration": [*python, str(REPO / "tools/train.py"), *QUICKSTART,
                                        "--work-dir", str(folder / f"quickstart_{isa}"), "--overwrite"],
            "plain script, 1 step": [*python, str(REPO / "benchmarks/plain/first_step.py")]}


def column(isa: str, rounds: int, folder: Path) -> dict:
    runs = commands(isa, folder)
    walls: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, command in runs.items():
            result = run_process(command)
            if result["code"] != 0:
                raise RuntimeError(f"{' '.join(command)} failed:\n{result['stderr'][-3000:]}")
            walls[name].append(result["wall"])
    medians = {name: statistics.median(values) for name, values in walls.items()}
    derived = {"import over torch": medians["import framework.engine.build"] - medians["import torch"],
               "first iteration after plain": medians["Quickstart, 1 iteration"] - medians["plain script, 1 step"]}
    return {"medians_s": medians, "derived_s": derived, "runs_s": walls,
            "meets": {name: derived[name] <= goal for name, goal in GOALS_S.items()}}


def loaded_packages(isa: str, folder: Path) -> list[str]:
    code = MODULES_PROBE.format(args=[*QUICKSTART, "--work-dir", str(folder / f"modules_{isa}"), "--overwrite"],
                                train=str(REPO / "tools/train.py"))
    result = subprocess.run([*ISA_ENV[isa], sys.executable, "-c", code], cwd=REPO, env=ENV, capture_output=True,
                            text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-3000:])
    return json.loads(result.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--isa", nargs="+", choices=list(ISA_ENV), default=list(ISA_ENV))
    parser.add_argument("--rounds", type=int, default=7, help="process starts per command (medians)")
    parser.add_argument("--modules", action="store_true", help="list the packages a Quickstart run loads")
    parser.add_argument("--json", default=str(REPO / "work_dirs/benchmarks/startup.json"))
    args = parser.parse_args()
    results = {"date": time.strftime("%Y-%m-%d %H:%M"), "rounds": args.rounds, "goals_s": GOALS_S, "columns": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for isa in args.isa:
            results["columns"][isa] = column(isa, args.rounds, Path(tmp))
            if args.modules:
                loaded = loaded_packages(isa, Path(tmp))
                results["columns"][isa]["packages"] = {"loaded": loaded, "unused": sorted(UNUSED & set(loaded))}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=1))
    for isa, row in results["columns"].items():
        print(f"{isa:7s} " + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in row["medians_s"].items()))
        for name, seconds in row["derived_s"].items():
            print(f"        {name}: {seconds:+.2f} s (goal <= {GOALS_S[name]} s: "
                  f"{'meets' if row['meets'][name] else 'misses'})")
        if "packages" in row:
            print(f"        packages the run does not use: {row['packages']['unused'] or 'none'}")
    print(f"written: {args.json}")


if __name__ == "__main__":
    main()
