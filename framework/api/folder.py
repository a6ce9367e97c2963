"""Model folders: config.yaml + model.safetensors + README.md, the Hugging Face Hub's layout.

Only the networks a prediction runs are written (the segmenter's model; each direction's generator,
its EMA copy where the task keeps one), under `<network>.` prefixes: no optimizer, discriminator or
loss state. A folder read back builds the task from its config.yaml and loads exactly those
weights, so it predicts bit-identically to the model it was saved from.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import torch
import yaml

import framework
from framework.errors import CheckpointError, ConfigError
from framework.tasks.base import GeneratorTask

CONFIG, WEIGHTS, CARD = "config.yaml", "model.safetensors", "README.md"
FORMAT = "segan-model-folder"
INSTALL_HUB = "pip install -e '.[hub]'"


def prediction_networks(task) -> dict[str, torch.nn.Module]:
    """{prefix: network} of what a prediction runs."""
    if isinstance(task, GeneratorTask):
        return {direction or "generator": task.generator_for(direction) for direction in task.directions or (None,)}
    return {"model": task.model}


def save_model_folder(model, folder: Path, overwrite: bool = False) -> Path:
    """Write the three files into `folder`: a new or empty one, or a model folder written here before
    whose config.yaml and README.md are as written (their hashes are in the weights' metadata), so
    a user's own README.md, config.yaml or anything else is never replaced; `overwrite=True` replaces
    the three names whatever they hold (nothing else in the folder is touched). Each file is written
    beside its final name and moved in once all three are complete."""
    from safetensors.torch import save_file

    from framework.api.card import model_card
    from framework.runtime.overwrite import refuse_foreign_folder

    if not overwrite:
        refuse_foreign_folder("save_pretrained folder", folder, lambda path: written_here(folder, path),
                              advice="choose a new or empty folder, or pass overwrite=True to replace "
                                     f"{CONFIG}, {WEIGHTS} and {CARD} there")
    folder.mkdir(parents=True, exist_ok=True)
    # clone(): safetensors refuses tensors sharing memory (tied weights, views of one buffer)
    weights = {f"{prefix}.{key}": value.detach().cpu().clone().contiguous()
               for prefix, network in prediction_networks(model.task).items()
               for key, value in network.state_dict().items()}
    texts = {CONFIG: yaml.safe_dump(model.config, sort_keys=False), CARD: model_card(model)}
    metadata = {"format": FORMAT, "framework_version": framework.__version__, "task": type(model.task).__name__,
                "metrics": json.dumps(model.metrics), "written": json.dumps({name: sha256(text.encode("utf-8"))
                                                                             for name, text in texts.items()})}
    staged = {name: folder / f".{name}.partial" for name in (WEIGHTS, *texts)}
    try:
        save_file(weights, str(staged[WEIGHTS]), metadata=metadata)
        for name, text in texts.items():
            staged[name].write_text(text, encoding="utf-8")
        for name, path in staged.items():
            os.replace(path, folder / name)
    finally:
        for path in staged.values():
            path.unlink(missing_ok=True)
    return folder


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def written_here(folder: Path, path: Path) -> bool:
    """Whether `path` in `folder` is one of a model folder's files as `save_model_folder` wrote them."""
    from safetensors import safe_open

    weights = folder / WEIGHTS
    if path.parent != folder or path.name not in (CONFIG, WEIGHTS, CARD) or not weights.is_file():
        return False
    try:
        with safe_open(str(weights), framework="pt") as opened:
            metadata = opened.metadata() or {}
        if metadata.get("format") != FORMAT:
            return False
        hashes = json.loads(metadata.get("written", "{}"))
    except Exception:  # not a safetensors file we can read: not ours
        return False
    return path.name == WEIGHTS or hashes.get(path.name) == sha256(path.read_bytes())


def is_model_folder(folder: Path) -> bool:
    return (folder / WEIGHTS).is_file() or not (folder / "checkpoints").is_dir()


def read_model_folder(folder: Path, device: torch.device):
    """(task with the folder's weights, resolved config, the run's metrics the folder records)."""
    from safetensors import SafetensorError, safe_open

    from framework.engine.trained import load_trained_task

    for name in (CONFIG, WEIGHTS):
        if not (folder / name).is_file():
            raise CheckpointError(f"{folder}: not a model folder, it has no {name} (save_pretrained writes "
                                  f"{CONFIG}, {WEIGHTS} and {CARD}; a run folder holds checkpoints/)")
    task, plain = load_trained_task(str(folder / CONFIG), None, (), device)
    try:
        with safe_open(str(folder / WEIGHTS), framework="pt") as weights:
            state = {key: weights.get_tensor(key) for key in weights.keys()}  # noqa: SIM118 (not a dict)
            metadata = weights.metadata() or {}
    except (SafetensorError, OSError, ValueError) as err:  # a truncated or foreign file: one line naming it
        cause = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CheckpointError(f"{folder / WEIGHTS}: cannot read the weights, the file is truncated or not a "
                              f"safetensors file ({cause})") from err
    load_prediction_weights(task, state, folder / WEIGHTS)
    return task, plain, json.loads(metadata.get("metrics", "{}"))


def load_prediction_weights(task, state: dict[str, torch.Tensor], path: Path) -> None:
    """Load `state` into `prediction_networks(task)`; weights of another architecture are refused
    naming the first key that does not fit and both shapes (or the key one side lacks)."""
    expected = {f"{prefix}.{key}": value for prefix, network in prediction_networks(task).items()
                for key, value in network.state_dict().items()}
    for key, value in expected.items():
        if key not in state:
            raise CheckpointError(f"{path}: weights of another architecture: no {key} {tuple(value.shape)}, "
                                  "which the config's network has")
        if state[key].shape != value.shape:
            raise CheckpointError(f"{path}: weights of another architecture: {key} is {tuple(state[key].shape)} "
                                  f"in the file, {tuple(value.shape)} in the config's network")
    extra = [key for key in state if key not in expected]
    if extra:
        raise CheckpointError(f"{path}: weights of another architecture: {extra[0]} "
                              f"{tuple(state[extra[0]].shape)} is in the file, not in the config's network")
    for prefix, network in prediction_networks(task).items():
        network.load_state_dict({key[len(prefix) + 1:]: value for key, value in state.items()
                                 if key.startswith(f"{prefix}.")})


def check_class_count(task, num_classes: int | None, source) -> None:
    if num_classes is None:
        return
    found = getattr(task, "num_classes", None)
    if found is None:
        raise ConfigError(f"num_classes={num_classes}: {source} is a {type(task).__name__}, which has no classes")
    if found != num_classes:
        raise ConfigError(f"num_classes={num_classes}: {source} predicts {found} classes, not {num_classes}")


def hub_module(what: str):
    """huggingface_hub, or a ConfigError saying how to install it."""
    try:
        import huggingface_hub
    except ImportError:
        raise ConfigError(f"{what} needs huggingface_hub, which is not installed: {INSTALL_HUB}") from None
    return huggingface_hub


def hub_cache_folder(name: str) -> Path:
    """The local Hugging Face Hub cache's snapshot of repo `name`; never the network (local_files_only)."""
    try:
        import huggingface_hub
    except ImportError:
        raise CheckpointError(f"{name}: no such file or folder (a Hub name is read from the local Hugging Face "
                              f"cache, which needs huggingface_hub: {INSTALL_HUB})") from None
    try:
        return Path(huggingface_hub.snapshot_download(name, local_files_only=True))
    except Exception as err:  # not cached, or not a repo name: one line, and nothing downloaded
        raise CheckpointError(f"{name}: no such file or folder, nor a model in the local Hugging Face cache "
                              f"(nothing is downloaded: `huggingface-cli download {name}` first)") from err


def push_to_hub(model, repo: str, **kwargs) -> str:
    """Write the model folder to a temporary folder and upload it to Hub repo `repo` (created if needed)."""
    if not isinstance(repo, str) or repo.count("/") != 1 or not all(repo.split("/")):
        raise ConfigError(f"repo: expected a Hub repository name 'user/name', got {repo!r}"[:200])
    hub = hub_module("push_to_hub")
    with tempfile.TemporaryDirectory() as tmp:
        save_model_folder(model, Path(tmp))
        private = kwargs.pop("private", None)  # create_repo's; upload_folder takes the rest (token, commit_message)
        hub.create_repo(repo, exist_ok=True, token=kwargs.get("token"), private=private)
        return str(hub.upload_folder(repo_id=repo, folder_path=tmp, **kwargs))
