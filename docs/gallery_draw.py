"""The gallery's pictures of one finished run (docs/make_gallery.py): a grid of validation samples
drawn through the Python API (`framework.load`), and its training curves from what the run wrote
(TensorBoard scalars for the losses, metrics.jsonl for the evaluations).

Every grid is made of the validation set's first images, at the config's own size, enlarged by
whole pixels (nearest neighbour) so a 32 x 32 sample is not blurred by the browser's scaling.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import cv2
import numpy as np
import torch
import yaml

from framework.visualization.masks import overlay
from framework.visualization.panels import side_by_side, stack_rows

MAX_BYTES = 200 * 1024  # the docs' limit per image: a page of a dozen stays light
TILE = 128  # pixels a sample is enlarged to (at least): 64 -> x2, 32 -> x4
GAP = 4  # white pixels between tiles
HEADER = 22  # the column names' strip


def run_config(run_dir: Path) -> dict:
    """The run's resolved config (what tools/train.py wrote into the work dir)."""
    return yaml.safe_load((Path(run_dir) / "config.yaml").read_text())


def validation_samples(config: dict, count: int) -> list[dict]:
    """The first `count` items of the config's data.val dataset, as its pipeline gives them."""
    from framework.config import import_custom_modules
    from framework.registry import DATASETS

    import_custom_modules(config)  # a project's dataset (pix2pix, CycleGAN, DCGAN) registers on import
    dataset = DATASETS.build(config["data"]["val"]["dataset"], path="data.val.dataset")
    return [dataset[i] for i in range(min(count, len(dataset)))]


def hwc(image: torch.Tensor) -> np.ndarray:
    """3 x H x W uint8 tensor -> H x W x 3 numpy (what the API takes and returns)."""
    return image.permute(1, 2, 0).numpy()


def grid_tiles(model, samples: list[dict], seed: int) -> tuple[list[str], list[list[np.ndarray]]]:
    """(column names, a row of H x W x 3 uint8 tiles per sample) for the model's kind of task."""
    if not model.is_generator:
        images = [hwc(s["image"]) for s in samples]
        palette = model.palette
        predictions = model.predict(images)
        return (["image", "ground truth", "prediction"],
                [[image, overlay(image, s["mask"].numpy(), palette), overlay(image, pred, palette)]
                 for image, s, pred in zip(images, samples, predictions)])
    kind = model.task.conditioning
    if kind == "image":  # pix2pix and the like: a paired input and its target
        outputs = model.generate([hwc(s["input"]) for s in samples])
        return (["input", "output", "target"],
                [[hwc(s["input"]), out, hwc(s["target"])] for s, out in zip(samples, outputs)])
    if kind == "unpaired":  # CycleGAN on the paired validation set: B is A's counterpart
        a, b = [hwc(s["a"]) for s in samples], [hwc(s["b"]) for s in samples]
        a_to_b, b_to_a = model.translate(a, "AtoB"), model.translate(b, "BtoA")
        return (["A", "A -> B", "B", "B -> A"], [list(row) for row in zip(a, a_to_b, b, b_to_a)])
    if kind == "labels":  # semantic synthesis: two draws of noise per label map
        maps = [s["mask"].numpy() for s in samples]
        draws = model.generate(maps, samples=2, seed=seed)
        return (["label map", "draw 1", "draw 2", "real"],
                [[model.colorize(m), first, second, hwc(s["image"])]
                 for m, (first, second), s in zip(maps, draws, samples)])
    if kind == "noise":  # an unconditional GAN: four draws a row, a real image beside them
        fakes = model.generate(num=4 * len(samples), seed=seed)
        return (["draw", "draw", "draw", "draw", "real"],
                [[*fakes[4 * i:4 * i + 4], hwc(s["image"])] for i, s in enumerate(samples)])
    raise ValueError(f"{type(model.task).__name__}: no gallery grid for conditioning {kind!r}")


def compose(columns: list[str], rows: list[list[np.ndarray]]) -> np.ndarray:
    """Tiles enlarged and spaced, joined by the framework's panel helpers, column names on top."""
    size = rows[0][0].shape[0]
    scale = max(1, -(-TILE // size))

    def tile(image: np.ndarray) -> torch.Tensor:
        big = cv2.resize(np.ascontiguousarray(image), None, fx=scale, fy=scale, interpolation=cv2.INTER_NEAREST)
        big = cv2.copyMakeBorder(big, 0, GAP, 0, GAP, cv2.BORDER_CONSTANT, value=(255, 255, 255))
        return torch.from_numpy(big).permute(2, 0, 1)[None]

    panels = torch.cat([side_by_side(*[tile(image) for image in row]) for row in rows])
    body = stack_rows(panels).permute(1, 2, 0).numpy()
    header = np.full((HEADER, body.shape[1], 3), 255, np.uint8)
    width = size * scale + GAP
    for i, name in enumerate(columns):
        (text_width, _), _ = cv2.getTextSize(name, cv2.FONT_HERSHEY_SIMPLEX, 0.45, 1)
        x = i * width + max(0, (width - GAP - text_width) // 2)
        cv2.putText(header, name, (x, HEADER - 7), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (0, 0, 0), 1, cv2.LINE_AA)
    return np.ascontiguousarray(np.concatenate([header, body])[:-GAP, :-GAP])


def save_image(image: np.ndarray, stem: Path) -> Path:
    """PNG (exact pixels) when it stays under MAX_BYTES, else JPEG at quality 90 (noisy textures
    compress badly losslessly). Returns the file written; the other format's stale file is removed."""
    bgr = cv2.cvtColor(image, cv2.COLOR_RGB2BGR)
    for suffix, options in ((".png", [cv2.IMWRITE_PNG_COMPRESSION, 9]), (".jpg", [cv2.IMWRITE_JPEG_QUALITY, 90])):
        ok, data = cv2.imencode(suffix, bgr, options)
        if ok and len(data) <= MAX_BYTES:
            path = stem.with_suffix(suffix)
            path.write_bytes(data.tobytes())
            for other in (".png", ".jpg"):
                if other != suffix:
                    stem.with_suffix(other).unlink(missing_ok=True)
            return path
    raise ValueError(f"{stem}: the image of {image.shape[1]} x {image.shape[0]} is over {MAX_BYTES} bytes as PNG and JPEG")


def draw_samples(run_dir: Path, stem: Path, rows: int = 4, seed: int = 0) -> tuple[Path, list[str]]:
    """The sample grid of a run's best checkpoint (else its latest): (file, column names)."""
    import framework

    model = framework.load(run_dir, device="cpu")
    columns, tiles = grid_tiles(model, validation_samples(model.config, rows), seed)
    return save_image(compose(columns, tiles), stem), columns


def scalar_curves(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(iteration, value)]} of the run's TensorBoard scalars (every logged point)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(Path(run_dir) / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def loss_tags(tags) -> list[str]:
    """The total losses: `train/loss`, else each network's (`loss_g`, `loss_d`, or one per
    discriminator: CycleGAN's `loss_d_a` and `loss_d_b`); their parts (loss_g_adv, loss_d_real,
    the R1 penalty loss_d_r1_a, ...) would crowd the plot."""
    names = {tag.removeprefix("train/") for tag in tags if tag.startswith("train/loss")}
    totals = [name for name in ("loss", "loss_g", "loss_d") if name in names]
    if "loss_d" not in names:
        totals += sorted(n for n in names if n.startswith("loss_d_") and not re.search("fake|real|r1", n))
    return [f"train/{name}" for name in totals]


def evaluated_metric(run_dir: Path, config: dict) -> tuple[str | None, str, list[tuple[int, float]]]:
    """(name, "max"/"min", [(iteration, value)]) of the run's train.best_metric (its best_mode
    resolved by the config), else of the first number its metrics.jsonl records, which way its
    name says; None: no evaluated number (DCGAN evaluates none)."""
    from framework.comparison.summary import read_curves
    from framework.config.metric_direction import metric_direction

    path = Path(run_dir) / "metrics.jsonl"
    name, mode = config["train"].get("best_metric"), config["train"].get("best_mode")
    if not name:
        records = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
        numbers = [key for record in records for key, value in record.items()
                   if key not in ("iter", "epoch") and isinstance(value, (int, float))]
        name = numbers[0] if numbers else None
        mode = "min" if name and metric_direction(name) == "less" else "max"
    if not name:
        return None, "max", []
    return name, mode, read_curves(path, [name])[name]


def draw_curves(run_dir: Path, stem: Path) -> tuple[Path, str | None, tuple[int, float] | None]:
    """Losses (left) and the evaluated metric with its best point (right) against iterations:
    (file, the metric's name, its best (iteration, value))."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    scalars = scalar_curves(run_dir)
    metric, mode, curve = evaluated_metric(run_dir, run_config(run_dir))
    figure = Figure(figsize=(8, 3), dpi=100)
    FigureCanvasAgg(figure)
    losses, evaluation = figure.subplots(1, 2)
    for tag in loss_tags(scalars):
        losses.plot(*zip(*scalars[tag]), linewidth=1, label=tag.removeprefix("train/"))
    losses.set_xlabel("iteration")
    losses.set_title("training loss (each log interval)", fontsize=10)
    losses.legend(fontsize=8)
    best = None
    if curve:
        evaluation.plot(*zip(*curve), marker="o", markersize=3, color="#2ca02c")
        candidates = [point for point in curve if point[0] > 0] or curve  # iteration 0: the untrained start
        best = (max if mode == "max" else min)(candidates, key=lambda point: point[1])
        evaluation.plot(*best, marker="*", markersize=12, color="#d62728", linestyle="none",
                        label=f"best {best[1]:.3f} at {best[0]}")
        evaluation.legend(fontsize=8)
        evaluation.set_title(f"{metric} on the validation set ({'higher' if mode == 'max' else 'lower'} is better)",
                             fontsize=10)
    else:
        evaluation.text(0.5, 0.5, "no validation metric in this config", ha="center", va="center")
        evaluation.set_axis_off()
    evaluation.set_xlabel("iteration")
    for axes in (losses, evaluation):
        axes.grid(alpha=0.3)
        axes.ticklabel_format(useOffset=False)  # "+1.286e1" above an axis reads as a value
    figure.tight_layout()
    canvas = figure.canvas
    canvas.draw()
    image = np.asarray(canvas.buffer_rgba())[..., :3].copy()
    return save_image(image, stem), metric, best
