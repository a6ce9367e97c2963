"""Everything a CUDA GPU must show, in one command of at most 8 minutes:

    python benchmarks/gpu/gpu_check.py OUT_DIR          # on a machine with one CUDA GPU
    python benchmarks/gpu/gpu_check.py --dry-run        # the plan: steps, budgets, commands

Steps (`plan`), each a process of its own with its own time budget (the budgets add up to at most
`TOTAL_BUDGET_S`); a step that fails or runs out of time is recorded and the next one runs:
1. `cuda_tests`: the `cuda`-marked tests (`pytest -m cuda`, tests/test_cuda.py);
2. `amp_gan`: float16 and bfloat16 with two optimizers, pix2pix and CycleGAN
   (benchmarks/gpu/gpu_amp_gan.py: an overflow planted per optimizer skips that step alone, nothing
   non-finite after it; the validation metric of a short run within the float32 seeds' spread);
3. `speed`: the Quickstart, the VOC-layout config and pix2pix against the plain scripts of
   benchmarks/plain/ on the same GPU: seconds per iteration and their ratio, peak GPU memory,
   float32 and AMP, channels_last off and on, torch.compile off and on (benchmarks/gpu/gpu_speed.py);
4. `two_processes`: two processes on the one GPU, NCCL where it allows it, else gloo with CUDA
   tensors: DDP and SyncBN against one process at the double batch (benchmarks/gpu/gpu_two_processes.py).

Writes OUT_DIR/gpu_check.json (every step's status, seconds and figures), OUT_DIR/gpu_check.md (the
tables docs/performance.md takes) and OUT_DIR/<step>.log. Exit status 0 when every step passed, 1
otherwise; without CUDA it says so in one line, lists the plan and exits with 2 before writing anything.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from framework.errors import ConfigError
from framework.runtime.cli import output_folder, run

TOTAL_BUDGET_S = 480  # 8 minutes, the steps' budgets together
NO_CUDA = "gpu_check: no CUDA device here (torch.cuda.is_available() is False): nothing run, nothing written"


@dataclass
class Step:
    name: str
    budget_s: int
    what: str
    command: list[str]
    result_file: str | None = None  # the step's own JSON, read into the report


STEP_NAMES = ("cuda_tests", "amp_gan", "speed", "two_processes")


def plan(out: Path) -> list[Step]:
    python = sys.executable
    return [
        Step("cuda_tests", 150, "the cuda-marked tests (pytest -m cuda)",
             [python, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider", "-n", "6", "--dist", "load",
              f"--junitxml={out / 'cuda_tests.xml'}"]),
        Step("amp_gan", 100, "float16/bfloat16 with two optimizers: overflow per optimizer, quality vs float32 seeds",
             [python, str(REPO / "benchmarks/gpu/gpu_amp_gan.py"), "--json", str(out / "amp_gan.json")], "amp_gan.json"),
        Step("speed", 150, "s/iter and peak memory vs the plain scripts: fp32/AMP, channels_last, compile",
             [python, str(REPO / "benchmarks/gpu/gpu_speed.py"), "--json", str(out / "speed.json")], "speed.json"),
        Step("two_processes", 75, "two processes on one GPU (NCCL, else gloo): DDP and SyncBN vs the double batch",
             [python, str(REPO / "benchmarks/gpu/gpu_two_processes.py"), "--timeout", "30",
              "--json", str(out / "two_processes.json")], "two_processes.json"),
    ]


def describe_plan(steps: list[Step]) -> str:
    lines = [f"{i}. {s.name} (at most {s.budget_s} s): {s.what}\n   {' '.join(s.command)}"
             for i, s in enumerate(steps, 1)]
    total = sum(s.budget_s for s in steps)
    return "\n".join([*lines, f"budgets together: {total} s of {TOTAL_BUDGET_S}"])


def run_step(step: Step, out: Path) -> dict:
    """Run one step within its budget; its process group is killed when the budget runs out."""
    log = out / f"{step.name}.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    with open(log, "w") as output:
        process = subprocess.Popen(step.command, cwd=REPO, env=env, stdout=output, stderr=subprocess.STDOUT,
                                   start_new_session=True)  # its own group: its children die with it
        try:
            code = process.wait(timeout=step.budget_s)
            status = "passed" if code == 0 else "failed"
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            code, status = process.wait(), "timed out"
    record = {"name": step.name, "what": step.what, "budget_s": step.budget_s,
              "seconds": round(time.perf_counter() - start, 1), "status": status, "exit_code": code,
              "log": log.name, "tail": log.read_text(errors="replace")[-1500:]}
    result = out / step.result_file if step.result_file else None
    if result is not None and result.is_file():  # partial figures of a step cut short are kept
        record["result"] = json.loads(result.read_text())
    return record


def machine() -> dict:
    import torch

    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "gpu": torch.cuda.get_device_name(0),
            "capability": ".".join(map(str, torch.cuda.get_device_capability(0))), "torch": torch.__version__,
            "cuda": torch.version.cuda}


# ----------------------------------------------------------------------------- markdown


def ms(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


def mb(value) -> str:
    return "-" if value is None else f"{value:.0f}"


def speed_rows(result: dict) -> list[str]:
    rows = ["| case | variant | plain ms/iter | framework ms/iter | ratio | plain peak MB | framework peak MB |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for case, variants in result.get("cases", {}).items():
        for variant, row in variants.items():
            plain, ours = row["plain"], row["framework"]
            rows.append(f"| {case} | {variant} | {ms(plain['s_per_iter'])} | {ms(ours['s_per_iter'])} | "
                        f"x{row['ratio']:.3f} | {mb(plain['peak_mb'])} | {mb(ours['peak_mb'])} |")
    return rows


def check_rows(result: dict) -> list[str]:
    rows = ["| check | ok | figures |", "| --- | --- | --- |"]
    checks = result.get("checks", result)  # amp_gan nests them; two_processes does not
    for name, figures in checks.items():
        if isinstance(figures, dict):
            shown = {k: v for k, v in figures.items() if k not in ("ok", "logs")}
            rows.append(f"| {name} | {'yes' if figures.get('ok') else 'NO'} | `{json.dumps(shown)}` |")
    return rows


def markdown(report: dict) -> str:
    head = report["machine"]
    lines = [f"# GPU check: {head['gpu']} (compute capability {head['capability']}), torch {head['torch']}, "
             f"CUDA {head['cuda']}, {head['date']}", "",
             "| step | status | seconds | budget s |", "| --- | --- | ---: | ---: |"]
    lines += [f"| {s['name']} | {s['status']} | {s['seconds']} | {s['budget_s']} |" for s in report["steps"]]
    for step in report["steps"]:
        result = step.get("result")
        if result is None:
            continue
        lines += ["", f"## {step['name']}", ""]
        lines += speed_rows(result) if step["name"] == "speed" else check_rows(result)
    return "\n".join(lines) + "\n"


def parse_args() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", nargs="?", type=output_folder, help="folder for gpu_check.json, gpu_check.md and the logs")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    parser.add_argument("--steps", nargs="+", choices=STEP_NAMES, help="run only these steps (names as in the plan)")
    return parser


def main(argv=None) -> int:
    """The command: its options checked (one `error:` line, exit status 2, for a bad one) before
    anything runs or is written."""
    return run(check, parse_args(), argv)


def check(args: argparse.Namespace) -> int:
    out = Path(args.out or "gpu_check").resolve()
    steps = [s for s in plan(out) if not args.steps or s.name in args.steps]
    if args.dry_run:
        print(describe_plan(steps))
        return 0
    if args.out is None:
        raise ConfigError("OUT_DIR: the folder to write the report to (or --dry-run)")
    import torch

    if not torch.cuda.is_available():
        print(NO_CUDA)
        print("It would run:\n" + describe_plan(steps))
        return 2
    out.mkdir(parents=True, exist_ok=True)
    report = {"machine": machine(), "steps": []}
    for step in steps:
        print(f"{time.strftime('%H:%M:%S')}  {step.name} (at most {step.budget_s} s) ...", flush=True)
        report["steps"].append(run_step(step, out))
        print(f"{time.strftime('%H:%M:%S')}  {step.name}: {report['steps'][-1]['status']} "
              f"in {report['steps'][-1]['seconds']} s", flush=True)
        (out / "gpu_check.json").write_text(json.dumps(report, indent=1))  # after each: a cut-short run keeps its steps
        (out / "gpu_check.md").write_text(markdown(report))
    print(f"written: {out / 'gpu_check.json'}, {out / 'gpu_check.md'}")
    return 0 if all(s["status"] == "passed" for s in report["steps"]) else 1


if __name__ == "__main__":
    sys.exit(main())
