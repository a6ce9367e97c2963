"""What `Task` and `GeneratorTask` derive by default, so a task written from docs/extending.md
neither declares what its parts already know nor loses pictures and warnings without a word:

- from its `Adversary` parts (any submodule that is one): whether a loss differentiates a
  gradient (WGAN-GP's penalty, R1), which the start-up check must run with gradients for and
  SyncBatchNorm cannot do; and the D-wins / collapse warnings of their health checks;
- from what `val_step` returns: the pictures of a generator, a row per sample of the images it
  returns among "input", "fake" and "real" (N x 3 x H x W, or N x 1 x H x W, floats in [0, 1]),
  for TensorBoard (`visualize`) and tools/test.py --show-dir (`save_visuals`).

Where no picture can be derived, --show-dir is refused in one line naming what is missing, and
TensorBoard's evaluation samples are missing with one warning, not silently.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from framework.errors import ConfigError
from framework.visualization.panels import side_by_side, stack_rows, write_named_pngs

logger = logging.getLogger(__name__)

PICTURE_KEYS = ("input", "fake", "real")  # a row's order: what went in, what came out, what was wanted
_WARNED_NO_SAMPLES: set[str] = set()  # task classes already told (once per process, not per evaluation)


def adversaries_of(task: nn.Module) -> list[nn.Module]:
    """The task's Adversary parts, in the order they were assigned."""
    from framework.tasks.adversary import Adversary  # adversary.py imports tasks/base.py, which imports this

    return [module for module in task.modules() if isinstance(module, Adversary)]


def uses_double_backward(task: nn.Module) -> bool:
    return any(adversary.uses_double_backward for adversary in adversaries_of(task))


def adversary_warnings(task: nn.Module, logged: dict[str, float]) -> list[str]:
    return [warning for adversary in adversaries_of(task) for warning in adversary.diagnose(logged)]


def generator_panels(outputs: dict) -> torch.Tensor | None:
    """N x 3 x H x (k W) rows joining the outputs' pictures side by side, or None without a "fake"
    image. An "input" of another size or channel count (a label map, noise) is left out."""
    fake = outputs.get("fake") if isinstance(outputs, dict) else None
    if not _is_picture(fake):
        return None
    pictures = [outputs[key] for key in PICTURE_KEYS if _is_picture(outputs.get(key))
                and outputs[key].shape[0] == fake.shape[0] and outputs[key].shape[2:] == fake.shape[2:]]
    return side_by_side(*(picture.expand(-1, 3, -1, -1) for picture in pictures))


def _is_picture(value) -> bool:
    return (isinstance(value, torch.Tensor) and value.is_floating_point() and value.ndim == 4
            and value.shape[1] in (1, 3))


def no_pictures(task: nn.Module) -> str:
    return (f"{type(task).__name__}'s val_step returns no \"fake\" image (N x 3 x H x W, floats in [0, 1]) "
            "to draw, and the task defines no visualize / save_visuals of its own")


def sample_rows(task: nn.Module, outputs: dict, max_images: int) -> dict:
    """{"samples": a row per sample} for TensorBoard, or {} after one warning per task class."""
    panels = generator_panels(outputs)
    if panels is not None:
        return {"samples": stack_rows(panels, max_images)}
    return no_samples(task, no_pictures(task))


def no_samples(task: nn.Module, reason: str) -> dict:
    """No TensorBoard samples: {} and, the first time for this task class, a warning saying why."""
    if type(task).__name__ not in _WARNED_NO_SAMPLES:
        _WARNED_NO_SAMPLES.add(type(task).__name__)
        logger.warning(f"warning: no evaluation samples in TensorBoard: {reason}")
    return {}


def write_pictures(task: nn.Module, batch: dict, outputs: dict, folder) -> None:
    """One PNG per sample, named after the sample ("name", else its dataset "index")."""
    panels = generator_panels(outputs)
    if panels is None:
        raise ConfigError(f"--show-dir: nothing to write: {no_pictures(task)}")
    if "name" in batch:
        names = list(batch["name"])
    elif "index" in batch:
        names = [f"{index:06d}" for index in torch.as_tensor(batch["index"]).tolist()]
    else:
        raise ConfigError(f"--show-dir: {type(task).__name__}'s batches carry no sample \"name\" or \"index\" "
                          "to name the pictures after")
    write_named_pngs(folder, names, panels)
