"""Every recipe config (tests/test_recipe_cards.py) at its own settings on the CPU: two training
iterations on a fixture tree of its dataset (tools/make_fixture_dataset.py, as many samples as a
batch holds), then tools/analyze_model.py at the paper's resolution. Too slow for the test suite
(tens of seconds to minutes a recipe); run once, by hand, and copy the table into docs/recipes.md:

    OMP_NUM_THREADS=1 python tests/scripts/recipe_smoke.py [--only NAME ...] [--no-train] [--json FILE]

What changes from the config as shipped, and why: `data.train.dataset.root` (the fixture tree),
no worker processes (the timing is the step's, not the loader's), no evaluation (the metrics need
a trained judge; the FID of the OASIS recipes' best checkpoint, a local Inception file), checkpoints at iteration 2 (saving is part of the run), and no downloaded weights
(the VGG19 of the perceptual losses random, the DeepLabV3+ encoder from scratch; the shapes and
the FLOPs are the same). Seconds per iteration are the logger's `time` of iteration 2, on whatever
else the machine is running: the load average is printed beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from test_recipe_cards import RECIPE_CONFIGS  # noqa: E402

from framework.config import load_config, to_plain  # noqa: E402
from framework.data.published.fixture_trees import write_fixture_tree  # noqa: E402
from published_fixtures import LAYOUT_OF, without_inception_metrics  # noqa: E402

# The paper's resolution of each recipe (height, width): what analyze_model measures at.
RESOLUTION = {"spade_cityscapes": (256, 512), "spade_ade20k": (256, 256), "oasis_cityscapes": (256, 512),
              "oasis_ade20k": (256, 256), "pix2pixhd_cityscapes": (512, 1024), "cyclegan_horse2zebra": (256, 256),
              "pix2pix_facades": (256, 256), "deeplabv3plus_r50_cityscapes": (512, 1024)}
ITERATION_TIME = re.compile(r"iter 2/2 .* time ([0-9.]+)s")


def run(tool: str, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    return subprocess.run([sys.executable, str(REPO / "tools" / f"{tool}.py"), *map(str, args)], cwd=REPO, env=env,
                          capture_output=True, text=True)


def shipped_changes(plain: dict, tmp: Path) -> list[str]:
    """The overrides the module docstring lists, for one recipe."""
    dataset, task = plain["data"]["train"]["dataset"], plain["task"]
    root = write_fixture_tree(LAYOUT_OF[dataset["type"]], tmp / "fixture", samples=max(2, plain["data"]["train"]["batch_size"]))
    changes = [f"data.train.dataset.root={root}", "data.train.num_workers=0", "data.val.num_workers=0",
               "train.max_iters=2", "train.val_interval=0", "train.val_at_start=false", "train.ckpt_interval=2",
               "train.log_interval=1", "loggers=[]", "device=cpu"]
    changes += without_inception_metrics(plain)
    if task.get("perceptual"):
        changes.append("task.perceptual.weights=random")
    if "encoder_weights" in task.get("model", {}):
        changes.append("task.model.encoder_weights=null")
    return changes


def smoke(config: str, tmp: Path, train: bool = True) -> dict:
    name = Path(config).stem
    plain = to_plain(load_config(str(REPO / config)))
    changes = shipped_changes(plain, tmp)
    row = {"recipe": name}
    if train:
        row.update(trained_twice(config, changes, tmp))
    height, width = RESOLUTION[name]
    report = tmp / "analysis.json"
    analyzed = run("analyze_model", "--config", config, "--size", height, width, "--json", report, "--depth", "0",
                   *[c for c in changes if c.startswith("task.")])
    row["size"] = f"{height}x{width}"
    if analyzed.returncode:
        row["analyze_error"] = analyzed.stderr.strip().splitlines()[-1]
        return row
    for network, entry in json.loads(report.read_text()).items():
        whole = entry["modules"][0]
        row[network] = {"params": whole["params"], "flops": whole["flops"]}
    return row


def trained_twice(config: str, changes: list[str], tmp: Path) -> dict:
    """Two iterations: their return code, wall seconds, the second one's seconds, the precision."""
    start = time.perf_counter()
    trained = run("train", "--config", config, "--work-dir", tmp / "run", *changes)
    row = {"train_rc": trained.returncode, "train_s": round(time.perf_counter() - start, 1),
           "load_average": round(os.getloadavg()[0], 1)}
    log = (tmp / "run" / "train.log").read_text() if (tmp / "run" / "train.log").is_file() else trained.stderr
    found = ITERATION_TIME.search(log)
    row["s_per_iter"] = float(found.group(1)) if found else None
    row["precision"] = next(iter(re.findall(r"precision (\w+)", log)), None)
    if trained.returncode:
        row["error"] = trained.stderr.strip().splitlines()[-1] if trained.stderr.strip() else "no message"
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", help="recipe names (config stems), run in this order; default: every recipe")
    parser.add_argument("--no-train", action="store_true", help="parameters and FLOPs only")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    by_name = {Path(c).stem: c for c in RECIPE_CONFIGS}
    unknown = sorted(set(args.only or ()) - set(by_name))
    if unknown:
        parser.error(f"--only: no recipe named {', '.join(unknown)} (choose from {', '.join(by_name)})")
    configs = [by_name[name] for name in args.only] if args.only else RECIPE_CONFIGS
    rows = []
    for config in configs:
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(smoke(config, Path(tmp), train=not args.no_train))
        print(json.dumps(rows[-1]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
