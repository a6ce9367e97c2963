"""The release suite in one command: every benchmark of this folder, one after another, into one
report. Rerun it when the hot path changes (the trainer, the optimizer step, the loaders, the task
steps, start-up) and put the figures in docs/performance.md.

    python benchmarks/release/run.py OUT            # the published settings (hours on 2 cores)
    python benchmarks/release/run.py OUT --quick    # reduced settings, to see that all of it runs
    python benchmarks/release/run.py --dry-run      # the plan: each command, nothing run
    python benchmarks/release/run.py OUT --only startup fixed_cost

Run it on an otherwise quiet machine: a second torch process slows a loop up to 8x on 2 cores, so
the scripts run one at a time, never beside each other. OUT must be new or empty (nothing is written
over an earlier report); it gets report.md (each script's command, exit status, wall time and the
tail of what it printed) and report.json. A script that fails is reported and the others still run;
the exit status is 1 when any failed.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
# name: (published settings, quick settings); every script of this folder but run.py is here
SUITE: dict[str, tuple[list[str], list[str]]] = {
    "startup": ([], ["--isa", "native", "--rounds", "3"]),
    "fixed_cost": ([], ["--steps", "50", "--repeats", "3"]),
    "in_process": (["--case", "segmentation"], ["--case", "segmentation", "--rounds", "3", "--block", "5"]),
    "speed": ([], ["--quick"]),
    "shared_machine": ([], ["--iters", "50", "--rounds", "1"]),
    "utilisation": ([], ["--configs", "unet", "--iters", "5", "--rounds", "1"]),
    "predict_vs_infer": ([], ["--num", "20", "--rounds", "2"]),
}
TAIL_LINES = 40


def commands(names: list[str], quick: bool) -> list[tuple[str, list[str]]]:
    return [(name, [sys.executable, str(HERE / f"{name}.py"), *SUITE[name][1 if quick else 0]]) for name in names]


def run_one(name: str, command: list[str]) -> dict:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    printed = (done.stdout + done.stderr).strip().splitlines()
    return {"script": f"benchmarks/release/{name}.py", "command": " ".join(command[1:]), "exit_status": done.returncode,
            "seconds": round(time.perf_counter() - start, 1), "output_tail": printed[-TAIL_LINES:]}


def write_report(out: Path, results: list[dict], quick: bool) -> None:
    meta = {"python": platform.python_version(), "machine": platform.machine(), "processor": platform.processor(),
            "quick": quick, "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    (out / "report.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    lines = ["# Release benchmarks", "", f"{meta['date']}, Python {meta['python']}, {meta['machine']}"
             f"{', quick settings' if quick else ''}", "", "| script | exit | seconds |", "| --- | --- | --- |"]
    lines += [f"| `{r['script']}` | {r['exit_status']} | {r['seconds']} |" for r in results]
    for result in results:
        lines += ["", f"## {result['script']}", "", f"`python {result['command']}`", "", "```",
                  *result["output_tail"], "```"]
    (out / "report.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", nargs="?", help="folder for report.md and report.json (new or empty)")
    parser.add_argument("--quick", action="store_true", help="reduced settings of each script")
    parser.add_argument("--only", nargs="+", choices=list(SUITE), help="these scripts only, in the suite's order")
    parser.add_argument("--dry-run", action="store_true", help="print the commands; run nothing")
    args = parser.parse_args()
    names = [name for name in SUITE if not args.only or name in args.only]
    plan = commands(names, args.quick)
    if args.dry_run:
        for _, command in plan:
            print(" ".join(["python", *command[1:]]))
        return 0
    if args.out is None:
        parser.error("OUT is required (or --dry-run)")
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        parser.error(f"OUT {out}: exists and is not an empty folder; nothing is written over an earlier report")
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for name, command in plan:
        print(f"running {name} ...", flush=True)
        results.append(run_one(name, command))
        write_report(out, results, args.quick)  # after each script: an interrupted suite keeps what ran
        print(f"  exit {results[-1]['exit_status']}, {results[-1]['seconds']} s", flush=True)
    print(f"report: {out / 'report.md'}")
    return int(any(result["exit_status"] != 0 for result in results))


if __name__ == "__main__":
    sys.exit(main())
