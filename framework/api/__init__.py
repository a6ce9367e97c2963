"""The Python API (docs/python-api.md): `load` a trained model (a run folder, a checkpoint, a model
folder or a Hub name in the local cache) as a `Model` that predicts or generates; `train` and
`evaluate` runs as tools/train.py and tools/test.py do. Re-exported as `framework.load`, ...

Owns: `Model` and the batch functions tools/infer.py shares with it (`model.py`), the rules its
arguments and infer.py's options are checked by (`arguments.py`), reading inputs (the pixel
scale of an array) and grouping them into same-size batches (`batches.py`), saliency maps of a list of images
(`saliency.py`), each kind's run over files, the body of tools/infer.py (`file_runs.py`), model
folders and the Hub (`folder.py`), the model card (`card.py`), training and evaluation runs
(`runs.py`, the body of tools/train.py and tools/test.py).
May import: __init__, errors, config, dist, data, engine, inference, metrics, tasks, visualization, checkpoint,
runtime.

Nothing here imports torch until it is called: tools/train.py imports `runs` before its config is
read, and `import framework` stays cheap.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

__all__ = ["Model", "load", "train", "evaluate"]


def load(path, device=None, config=None, num_classes: int | None = None):
    """A `Model` from `path`: a run folder (config.yaml + checkpoints/best.pth, else the latest),
    a training checkpoint (its run's config.yaml, or `config`), a model folder (save_pretrained),
    or "user/name" of the Hugging Face Hub cache (read locally, never downloaded). `device`: "cpu",
    "cuda", ... (default: auto). `num_classes`: refuse a model with another number of classes."""
    from framework.api.arguments import checked, path_argument
    from framework.api.card import final_metrics
    from framework.api.folder import check_class_count, hub_cache_folder, is_model_folder, read_model_folder
    from framework.api.model import Model
    from framework.checkpoint.files import load_checkpoint
    from framework.checkpoint.run_folder import BEST, read_latest
    from framework.engine.build import select_device
    from framework.engine.trained import load_trained_task
    from framework.errors import CheckpointError, ConfigError

    num_classes = checked({"num_classes": num_classes})["num_classes"]
    config = path_argument("config", config, optional=True)
    device = select_device(str(device) if device is not None else "auto")
    path = path_argument("path", path, want="any")  # a str or os.PathLike; what it names is looked at below
    if not path.exists():
        if not re.fullmatch(r"[\w.-]+/[\w.-]+", str(path)):  # no Hub name ("user/name") either
            raise ConfigError(f"path: {path}: no such file or folder")
        path = hub_cache_folder(str(path))
    run_dir = None
    model_folder = path.is_dir() and is_model_folder(path)
    if model_folder:
        if config is not None:
            raise ConfigError(f"config: {path} is a model folder; it reads its own config.yaml")
        task, plain, metrics = read_model_folder(path, device)
    else:
        if path.is_dir():
            run_dir, checkpoint = path, path / "checkpoints" / BEST
            if not checkpoint.is_file():
                checkpoint = read_latest(path / "checkpoints")
            if checkpoint is None:
                raise CheckpointError(f"{path}: a run folder without a checkpoint (checkpoints/best.pth or latest)")
        elif path.suffix.lower() in (".yaml", ".yml", ".json"):
            raise ConfigError(f"path: {path} is a config file; load takes a run folder, a checkpoint (.pth) or a "
                              "model folder (a checkpoint's config comes from its run folder, or config=FILE)")
        else:
            run_dir, checkpoint = path.parent.parent, path  # <run>/checkpoints/<name>.pth
        config = config if config is not None else run_dir / "config.yaml"
        if not config.is_file():
            load_checkpoint(checkpoint)  # a file that is no checkpoint is refused as one first
            raise CheckpointError(f"{path}: no config.yaml in its run folder {run_dir}; pass load(..., config=FILE)")
        task, plain = load_trained_task(str(config), str(checkpoint), (), device)
        metrics = final_metrics(run_dir)
    check_class_count(task, num_classes, path)
    return Model(task, plain, device, source=run_dir, metrics=metrics, has_discriminator_weights=not model_folder)


def train(config, overrides=None, work_dir=None, resume=None, overwrite: bool = False) -> dict:
    """Train `config` (a YAML file) with `overrides` ("key=value" strings) into `work_dir`, as
    tools/train.py does; the run's final evaluation (its last metrics.jsonl record; {} without one)."""
    from framework.api.arguments import checked, overrides_argument, path_argument, resume_argument
    from framework.api.card import final_metrics
    from framework.api.runs import run_training

    config = path_argument("config", config)
    overrides = overrides_argument(overrides)
    work_dir = path_argument("work_dir", work_dir, want="new folder", optional=True)
    resume, overwrite = resume_argument(resume), checked({"overwrite": overwrite})["overwrite"]
    _, work_dir = run_training(config, overrides, work_dir, resume, bool(overwrite))
    return final_metrics(Path(work_dir))


def evaluate(config, checkpoint, overrides=None, show_dir=None) -> dict:
    """The metrics of `checkpoint` on the config's data.test (else data.val), as tools/test.py
    computes them (no file written unless `show_dir`)."""
    from framework.api.arguments import overrides_argument, path_argument
    from framework.api.runs import run_evaluation

    config, checkpoint = path_argument("config", config), path_argument("checkpoint", checkpoint)
    show_dir = path_argument("show_dir", show_dir, want="new folder", optional=True)
    return run_evaluation(config, checkpoint, overrides_argument(overrides), show_dir=show_dir, log_file=False)


def __getattr__(name: str):
    if name == "Model":  # torch comes with it: imported on first use
        return importlib.import_module("framework.api.model").Model
    raise AttributeError(f"module 'framework.api' has no attribute {name!r}")
