"""The shipped synthesis configs retargeted to a family's folder, trained by tools/compare.py, and
their fakes of the val label maps drawn by the EMA generator (what tools/infer.py draws with) and
by the same checkpoint's live generator.

The retargeted config is a YAML file that takes the shipped one as `_base_` and changes what a
user changes for their data: the dataset (`VOCSegmentation` on the family's folder, its class
names), the class counts, the image size; the SegmenterScore metric (it names the project's own
judge) gives way to Diversity alone, since the family's own judge scores the fakes afterwards.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[3]
CONFIGS = [REPO / "configs/synthesis/oasis_textures.yaml", REPO / "configs/synthesis/spade_textures.yaml"]


def retargeted_config(source: Path, family, root: Path, iters: int, folder: Path) -> Path:
    """Write <folder>/<source's name>.yaml: the synthesis config `source` (the shipped ones, or a
    variant of them an ablation writes) on the family's folder."""
    from framework.config.loading import load_config

    classes = len(family.classes)
    shipped = load_config(source).task.discriminator
    # OASIS's segmenter D has a class per output plus "fake"; SPADE's sees the one-hot map and the image
    discriminator = {"num_classes": classes + 1} if "num_classes" in shipped else {"in_channels": classes + 3}
    dataset = {"type": "VOCSegmentation", "root": str(root), "classes": family.class_names}
    config = {"_base_": [str(Path(source).resolve())],
              "task": {"num_classes": classes, "discriminator": discriminator,
                       "generator": {"num_classes": classes, "image_size": family.size}},
              "data": {"train": {"dataset": {**dataset, "split": "train"}},
                       "val": {"dataset": {**dataset, "split": "val"}}},
              "metrics": [{"type": "Diversity"}],
              "train": {"max_iters": iters, "val_interval": iters, "ckpt_interval": min(250, iters),
                        "best_metric": "Diversity", "best_mode": "max"}}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{Path(source).stem}.yaml"
    path.write_text(json.dumps(config, indent=1) + "\n")  # JSON is YAML
    return path


def run_compare(configs: list[Path], seeds: list[int], work_dir: Path, core: int, log) -> int:
    """tools/compare.py on one core (so one thread per run); rerunning skips finished runs."""
    command = [sys.executable, str(REPO / "tools/compare.py"), "--configs", *map(str, configs),
               "--seeds", *map(str, seeds), "--metric", "Diversity", "--work-dir", str(work_dir)]
    log(" ".join(command))
    sys.stdout.flush()
    # its lines go to this process's output as they come (where each run is, in the protocol's log)
    done = subprocess.run(command, preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    return done.returncode


def final_checkpoint(run_dir: Path, iters: int) -> Path:
    """The checkpoint of the run's last iteration (tools/train.py names them iter_<N>.pth)."""
    path = run_dir / "checkpoints" / f"iter_{iters}.pth"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the run has no checkpoint of its last iteration")
    return path


@torch.no_grad()
def draws(run_dir: Path, checkpoint: Path, masks: torch.Tensor, names: list[str]) -> dict:
    """{"ema": [draw 0, draw 1], "live": [...]}: N x 3 x H x W uint8 images of the val label maps,
    each map's noise from (seed 0, draw, its name) as tools/infer.py keys it."""
    import framework
    from framework.inference.noise import item_noise

    model = framework.load(checkpoint, device="cpu", config=run_dir / "config.yaml")
    maps = [m.numpy() for m in masks]
    ema = model.generate(maps, samples=2, seed=0, names=names, batch_size=50)
    task = model.task
    live = task.generator.eval()
    result = {"ema": [torch.from_numpy(np.stack([pair[k] for pair in ema])).permute(0, 3, 1, 2) for k in (0, 1)],
              "live": []}
    for k in (0, 1):
        out = []
        for first in range(0, len(masks), 50):
            chunk = names[first:first + 50]
            noise = None if task.noise_shape is None else item_noise(task.noise_shape, 0, k, chunk)
            out.append(live(task.one_hot(masks[first:first + 50]), noise))
        result["live"].append(((torch.cat(out).clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8))
    return result
