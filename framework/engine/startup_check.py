"""Mistakes knowable at start-up, found with two samples before anything is written.

Without this stage they surface as tracebacks at the first iteration (or the first evaluation),
after the work dir, the logs and the pretrained-weights report exist. Two stages, called by
`build_trainer` (engine/build.py):

- `first_training_batch` (after the loaders are built): the training data's first two samples
  through the pipeline, and the evaluation data's first one. A transform that fails on them
  (a RandomCrop larger than the images) is named by its config path
  `data.train.dataset.pipeline[i] (RandomCrop)`; two samples of different sizes after the
  pipeline (photos of mixed sizes, or turned by their EXIF orientation, with no Resize) are
  named by their files, since they could never be collated. What is checked is these two
  samples, not every file: tools/check_dataset.py reads them all. Returns the batch of 2
  (batch 2: BatchNorm in training needs more than one value per channel).
- `check_first_step` (after the task is built, before pretrained weights, SyncBN, channels_last
  and compile): that batch through `task.train_iteration` with an optimizer object that
  updates nothing, so every network and loss the first step runs is run, on the real data,
  exactly as the first step calls it (a discriminator too deep for the image size, feature
  matching on a discriminator without features, a loss mode the model's output does not fit,
  data and network channels that differ). The failure becomes one ConfigError naming the
  config key of the network or loss that raised: the innermost module on the failing call's
  path whose attribute name is a key of the `task:` node; `<key>.in_channels` when it is that
  network's first convolution that the input does not fit.

The step runs under no_grad unless the task differentiates a gradient (R1, WGAN-GP), and no
backward runs. What it changes is put back: buffers (BatchNorm statistics, DiffAugment's p, step
counts), frozen weights (the EMA copies), the python numbers the task's modules hold (a loss
counting its calls), each rank's own state (image pools) and the random generators. It runs once per run (one forward of batch 2), never in the loop.
"""

from __future__ import annotations

import copy
from contextlib import nullcontext

import torch
from torch import nn
from torch.utils.data import default_collate

from framework.engine.evaluation import move_to_device
from framework.engine.random_state import rng_state, set_rng_state
from framework.errors import ConfigError, UserError


def first_training_batch(train_loader, val_loader, device: torch.device) -> dict | None:
    """Two training samples collated (on `device`) after the checks above (one when the loader's
    batch_size is 1: its batches never hold two samples, of one size or not); None for a dataset
    whose samples are not dicts (a custom format: left to the first step)."""
    state = rng_state()
    try:
        count = min(2, train_loader.batch_size)
        samples = [_sample(train_loader.dataset, index, "data.train.dataset") for index in range(count)]
        if val_loader is not None and len(val_loader.dataset):
            _sample(val_loader.dataset, 0, "data.val.dataset")
    finally:
        set_rng_state(state)
    if not all(isinstance(sample, dict) for sample in samples):
        return None
    if count > 1:
        _check_same_sizes(samples, "data.train.dataset")
    return move_to_device(default_collate(samples), device)


def _sample(dataset, index: int, path: str):
    """Sample `index` (the first one again when there is only one), seeded as in training."""
    index = index % len(dataset)
    item = (index, 0) if getattr(dataset, "takes_sample_seed", False) else index
    try:
        return dataset[item]
    except UserError:
        raise
    except Exception as err:
        transform = _failing_transform(dataset, err.__traceback__)
        if transform is None:
            raise
        position, name = transform
        raise ConfigError(f"{path}.pipeline[{position}] ({name}): {_first_line(err)} ({path}[{index}])") from err


def _failing_transform(dataset, trace) -> tuple[int, str] | None:
    """(position in the dataset's pipeline, type name) of the transform whose call raised."""
    transforms = getattr(getattr(dataset, "pipeline", None), "transforms", None) or []
    while trace is not None:
        owner = trace.tb_frame.f_locals.get("self")
        for position, transform in enumerate(transforms):
            if owner is transform:
                return position, type(transform).__name__
        trace = trace.tb_next
    return None


def _check_same_sizes(samples: list[dict], path: str) -> None:
    for key, first in samples[0].items():
        second = samples[1].get(key)
        if isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor) and first.shape != second.shape:
            sizes = [f"{sample.get('name', f'{path}[{i}]')} is {_size(sample[key])}" for i, sample in enumerate(samples)]
            raise ConfigError(
                f"{path}: samples of different sizes after the pipeline ({key}: {', '.join(sizes)}), which no "
                f"batch can hold: images of mixed sizes, or photos turned by their EXIF orientation; add a "
                f"Resize (or a crop) to {path}.pipeline")


def _size(tensor: torch.Tensor) -> str:
    return "x".join(map(str, tensor.shape[-2:])) if tensor.ndim >= 2 else str(tuple(tensor.shape))


class _NoUpdates:
    """The optimizers' interface (tasks/base.py's UpdatesNetworks) updating nothing."""

    log_details = False

    def __init__(self, names: tuple[str, ...]):
        self.names = list(names) or ["default"]

    def update(self, loss: torch.Tensor, name: str | None = None) -> None:
        pass

    def micro_step(self, index: int, total: int):
        return nullcontext()


def check_first_step(task: nn.Module, batch: dict, task_keys, data_path: str = "data.train.dataset") -> None:
    """Run the first training step's forward on `batch` (see the module docstring); a failure is
    one ConfigError naming `task.<key>` for the first of `task_keys` on the failing call's path."""
    trace = _CallTrace(task)
    saved = _restorable_state(task)
    try:
        with torch.no_grad() if not task.uses_double_backward else nullcontext():
            task.train_iteration([batch], _NoUpdates(task.required_optimizers))
    except UserError:
        raise
    except Exception as err:
        raise ConfigError(_blame(trace.open_calls, set(task_keys), err, batch, data_path)) from err
    finally:
        trace.remove()
        _restore(task, saved)


class _CallTrace:
    """Which of the task's modules are being called: (name, module, first input) from outermost to
    innermost. A call that raises leaves its entry, so after a failure the list is its path."""

    def __init__(self, task: nn.Module):
        self.open_calls: list[tuple[str, nn.Module, object]] = []
        self.handles = []
        for name, module in task.named_modules():
            if name:
                self.handles.append(module.register_forward_pre_hook(self._enter(name)))
                self.handles.append(module.register_forward_hook(self._leave))

    def _enter(self, name: str):
        def hook(module, inputs):
            self.open_calls.append((name, module, inputs[0] if inputs else None))
        return hook

    def _leave(self, module, inputs, output):
        if self.open_calls and self.open_calls[-1][1] is module:
            self.open_calls.pop()

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def _blame(open_calls, task_keys: set[str], err: Exception, batch: dict, data_path: str) -> str:
    names = [str(name) for name in batch.get("name", [])] if isinstance(batch.get("name"), list) else []
    source = f"the first training batch ({', '.join(names)})" if names else f"the first two samples of {data_path}"
    for depth in range(len(open_calls) - 1, -1, -1):
        name, network, _ = open_calls[depth]
        key = name.rsplit(".", 1)[-1]
        if key not in task_keys:
            continue
        stem = _first_conv(network)
        leaf, given = open_calls[-1][1], open_calls[-1][2]
        if (stem is not None and leaf is stem and isinstance(given, torch.Tensor) and given.ndim == 4
                and given.shape[1] != stem.in_channels):
            return (f"task.{key}.in_channels: {key} takes {stem.in_channels} channels but is given "
                    f"{given.shape[1]} in the first training step, on {source}")
        return f"task.{key}: {_first_line(err)} (the first training step, on {source})"
    return f"task: {_first_line(err)} (the first training step, on {source})"


def _first_conv(network: nn.Module) -> nn.Module | None:
    return next((m for m in network.modules() if isinstance(m, nn.modules.conv._ConvNd)), None)


def _first_line(err: Exception) -> str:
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0]


def _restorable_state(task: nn.Module) -> tuple:
    """What a forward-only step can change: every state entry but the trained weights (buffers,
    frozen and EMA weights, step counts), the python numbers the task's modules hold (a component
    counting its calls), each rank's own state, the random generators."""
    trained = {id(p) for p in task.parameters() if p.requires_grad}
    state = {key: value.detach().clone() for key, value in task.state_dict(keep_vars=True).items()
             if id(value) not in trained}
    numbers = [(module, {key: value for key, value in vars(module).items() if type(value) in (int, float, bool)})
               for module in task.modules()]
    return state, numbers, copy.deepcopy(task.rank_state_dict()), rng_state()


def _restore(task: nn.Module, saved: tuple) -> None:
    state, numbers, rank_state, generators = saved
    task.load_state_dict(state, strict=False)
    for module, values in numbers:
        vars(module).update(values)
    if rank_state:
        task.load_rank_state_dict(rank_state)
    set_rng_state(generators)
