"""The protocol's units of work, each ending in one JSON result file written last (atomically):
a unit whose file exists is done, so rerunning the protocol continues where it stopped.

- `judge`: the family's judge trained on the real train photos; its mIoU on the real val photos.
- `config`: one tools/compare.py run (config, seed), its final checkpoint's fakes of the val maps
  (EMA and live generator, two draws each) scored by the judge.
- `plain`: one plain paper script (variant, precision, seed) trained here, with a checkpoint every
  `CHECKPOINT_EVERY` iterations it resumes from, and its fakes scored the same way.
"""

import json
import os
import re
import time
from pathlib import Path

import torch

from . import judge as judges
from . import plain_papers

CHECKPOINT_EVERY = 250
LOG_EVERY = 50


def write_json(path: Path, data: dict) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(temporary, path)


def diversity(first: torch.Tensor, second: torch.Tensor) -> float:
    """Two draws' mean absolute difference on the 0..1 scale (the framework's Diversity's definition)."""
    return float((first.float() - second.float()).abs().mean() / 255)


def score_draws(judge, pair: list[torch.Tensor], masks: torch.Tensor, classes: int) -> dict:
    scores = [judges.score(judge, images, masks, classes) for images in pair]
    return {"mIoU": sum(scores) / len(scores), "mIoU_draws": scores, "diversity": diversity(*pair)}


def load_judge(folder: Path, classes: int):
    model = judges.make_judge(classes)
    model.load_state_dict(torch.load(folder / "judge.pth", map_location="cpu"))
    return model.eval()


def judge_unit(root: Path, folder: Path, classes: int, iters: int, batch: int, log=None) -> dict:
    start = time.perf_counter()
    model = judges.train_judge(root, classes, iters, batch=batch, log=log)
    seconds = time.perf_counter() - start
    torch.save(model.state_dict(), folder / "judge.pth")
    _, images, masks = judges.read_split(root, "val")
    return {"mIoU_real": judges.score(model, images, masks, classes), "iters": iters, "batch": batch,
            "seconds_per_iter": seconds / max(iters, 1)}


def train_seconds_per_iter(run_dir: Path) -> float | None:
    """The mean of the `time` fields of the run's log lines (seconds per iteration)."""
    times = [float(t) for t in re.findall(r" time ([0-9.]+)s", (run_dir / "train.log").read_text())]
    return sum(times) / len(times) if times else None


def config_unit(run_dir: Path, iters: int, judge, names, masks, classes: int) -> dict:
    from .config_runs import draws, final_checkpoint

    fakes = draws(run_dir, final_checkpoint(run_dir, iters), masks, names)
    return {"ema": score_draws(judge, fakes["ema"], masks, classes),
            "live": score_draws(judge, fakes["live"], masks, classes),
            "seconds_per_iter": train_seconds_per_iter(run_dir), "iters": iters, "run_dir": str(run_dir)}


def batch_indices(count: int, batch: int, seed: int, iteration: int) -> torch.Tensor:
    """The samples of `iteration`: epochs of a permutation each, seeded by (seed, epoch), so a
    resumed run reads what the uninterrupted one would have."""
    per_epoch = count // batch
    epoch, position = divmod(iteration, per_epoch)
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
    return order[position * batch:(position + 1) * batch]


def plain_unit(variant: str, bf16: bool, seed: int, data: tuple, classes: int, iters: int, folder: Path,
               judge, log, batch: int = 8) -> dict:
    """Train (or resume) the plain script, then score its fakes."""
    images, masks, val_names, val_masks = data
    checkpoint = folder / "state.pth"
    state = plain_papers.build(variant, classes, seed)
    if checkpoint.is_file():
        saved = torch.load(checkpoint, map_location="cpu", weights_only=False)
        for key in ("G", "D", "G_ema", "opt_g", "opt_d"):
            if state[key] is not None:
                state[key].load_state_dict(saved[key])
        state["iteration"], seconds = saved["iteration"], saved["seconds"]
        torch.set_rng_state(saved["rng"])
        log(f"  resumed at iteration {state['iteration']}")
    else:
        seconds = 0.0
    while state["iteration"] < iters:
        start = time.perf_counter()
        index = batch_indices(len(images), batch, seed, state["iteration"])
        plain_papers.step(state, variant, images[index].float() / 127.5 - 1, masks[index], bf16)
        seconds += time.perf_counter() - start
        if state["iteration"] % CHECKPOINT_EVERY == 0 or state["iteration"] == iters:
            saved = {key: state[key].state_dict() for key in ("G", "D", "G_ema", "opt_g", "opt_d")
                     if state[key] is not None}
            torch.save({**saved, "iteration": state["iteration"], "seconds": seconds, "rng": torch.get_rng_state()},
                       folder / "state.tmp")
            os.replace(folder / "state.tmp", checkpoint)
        if state["iteration"] % LOG_EVERY == 0 or state["iteration"] == iters:
            log(f"  iteration {state['iteration']}/{iters}, {seconds / state['iteration']:.2f} s/iter")
    result = {"live": score_draws(judge, [plain_papers.draw(state["G"], val_masks, classes, k) for k in (0, 1)],
                                  val_masks, classes),
              "seconds_per_iter": seconds / max(iters, 1), "iters": iters}
    if state["G_ema"] is not None:
        plain_papers.reestimate_ema_batchnorm(state, masks, batch)
        result["ema"] = score_draws(judge, [plain_papers.draw(state["G_ema"], val_masks, classes, k) for k in (0, 1)],
                                    val_masks, classes)
    return result
