"""The contract between the engine and what a training step means.

A Task is an nn.Module holding its networks (and losses). The engine calls only:

    train_iteration(batches, optim) -> dict of detached scalar tensors to log, averaged over the
                             micro-batches (`len(batches)` is train.accumulate). The default runs
                             `train_step` on each micro-batch; a task whose optimizers must see all
                             micro-batches in another order (a GAN: every D micro-batch, the D
                             step, then the G ones) overrides it.
    train_step(batch, optim) -> dict of detached scalar tensors to log (`loss`, `loss_ce`, ...)
    val_step(batch)          -> outputs that the run's metrics read (e.g. pred, target)
    visualize(batch, outputs, max_images) -> {tag: 3xHxW float image in [0, 1]} for TensorBoard
    save_visuals(batch, outputs, folder)  -> writes viewable images (tools/test.py --show-dir;
                             default: refused, naming the task; a GeneratorTask's default draws
                             what val_step returns)
    diagnose(logged)         -> warnings from the logs averaged over a log interval (default: its
                             Adversary parts' D-wins / collapse checks)
    uses_double_backward     a loss differentiates a gradient (derived from its Adversary parts)
    networks()               -> {name: module} trained by the optimizers (each DDP-wrapped apart)
    required_optimizers      names the task passes to optim.update (checked when optimizers are built)
    rank_state_dict() / load_rank_state_dict(state)
                             state each process keeps for itself (CycleGAN's image pools): the
                             engine gathers it from every rank into the checkpoint and gives each
                             rank its own back on resume (default: none)

What the tools ask of any task (declared here, so nobody asks `hasattr`):

    network_examples(height, width) -> {name: (network, inputs)}: each network it runs, with
                             example inputs of batch 1 for an image of that size (analyze_model)
    deployable(direction)    -> (module, input kind, size divisor or noise channels) to export
    upgrade_state_dict(state) renames an older release's checkpoint keys in place before loading
    saliency_score(target, ...) -> what saliency differentiates, from the input pixels

A task whose product is a generator (a GAN) is a `GeneratorTask` (below): inference/, export
and the tools ask it which generator to use and what that generator takes.

A task never calls backward, zero_grad or an optimizer's step: `optim.update(loss, name)` does
(see `UpdatesNetworks` for everything a task may call on `optim`).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import ClassVar, Protocol

import torch
from torch import nn

from framework.errors import ConfigError
from framework.tasks import derived
from framework.tasks.parts import Counter, frozen, total_loss  # noqa: F401 (imported from here too)


class UpdatesNetworks(Protocol):
    """What a task may call on the `optim` object the engine passes (framework/optim/optimizers.py)."""

    names: list[str]
    log_details: bool  # this iteration's logs are written: worth measuring costlier diagnostics

    def update(self, loss: torch.Tensor, name: str | None = None) -> None:
        """Backward `loss` and step optimizer `name` (the only one when None), with accumulation,
        loss scaling and clipping handled."""

    def micro_step(self, index: int, total: int):
        """Context for micro-batch `index` of `total` within one optimizer step."""


class Task(nn.Module):
    required_optimizers: tuple[str, ...] = ()

    def __init__(self):
        super().__init__()
        self.register_load_state_dict_pre_hook(_upgrade_on_load)

    def train_iteration(self, batches: list[dict], optim: UpdatesNetworks) -> dict:
        if len(batches) == 1:  # nothing to accumulate: the optimizers' default micro-step is 0 of 1
            return self.train_step(batches[0], optim)
        logs = []
        for index, batch in enumerate(batches):
            with optim.micro_step(index, len(batches)):
                logs.append(self.train_step(batch, optim))
        return average_logs(logs)

    def train_step(self, batch: dict, optim: UpdatesNetworks) -> dict:
        raise NotImplementedError

    @property
    def uses_double_backward(self) -> bool:
        """A loss differentiates a gradient (WGAN-GP, R1): the start-up check keeps gradients, and
        SyncBatchNorm (no double backward) is refused. Derived from the task's Adversary parts."""
        return derived.uses_double_backward(self)

    def val_step(self, batch: dict) -> dict:
        raise NotImplementedError

    def visualize(self, batch: dict, outputs: dict, max_images: int) -> dict:
        return derived.no_samples(self, f"{type(self).__name__} defines no visualize(batch, outputs, max_images)")

    def diagnose(self, logged: dict[str, float]) -> list[str]:
        """Warnings read from the logs averaged over a log interval (e.g. a GAN's collapse)."""
        return derived.adversary_warnings(self, logged)

    def save_visuals(self, batch: dict, outputs: dict, folder) -> None:
        raise ConfigError(f"--show-dir: {type(self).__name__} writes no pictures (it defines no save_visuals)")

    def rank_state_dict(self) -> dict:
        """This process's own state, not shared by the ranks (unlike the networks'); {}: none."""
        return {}

    def load_rank_state_dict(self, state: dict) -> None:  # noqa: B027 (optional)
        """Restore what `rank_state_dict` returned in this rank before the checkpoint."""

    def network_examples(self, height: int, width: int) -> dict[str, tuple[nn.Module, tuple]]:
        """{name: (network, its example inputs of batch 1)} for an image of height x width."""
        raise ConfigError(f"{type(self).__name__} does not say which networks it runs: it defines no "
                          "network_examples(height, width) -> {name: (network, example inputs)}")

    def deployable(self, direction: str | None = None) -> tuple[nn.Module, str, int]:
        """(module to export, its input kind "image" or "noise", the size divisor of an image input
        or the channels of a noise input)."""
        raise NotImplementedError(f"{type(self).__name__} cannot be exported (deployable)")

    def upgrade_state_dict(self, state: dict) -> None:  # noqa: B027 (optional)
        """Rename, in place, the keys an older release wrote (checkpoints keep resuming)."""

    def saliency_score(self, target, direction: str | None = None, settings=None, discriminator_loaded: bool = True):
        """Pixels N x C x H x W (floats, 0..255) -> what saliency differentiates: a score map N x H x W
        or a score per item (framework/inference/saliency.py)."""
        raise ConfigError(f"saliency: {type(self).__name__} does not say what to differentiate (saliency_score)")

    def networks(self) -> dict[str, nn.Module]:
        """Submodules with trainable parameters (an EMA copy or a loss has none)."""
        return {name: module for name, module in self.named_children()
                if any(p.requires_grad for p in module.parameters())}


def update_with(optim: UpdatesNetworks, name: str, terms: dict[str, torch.Tensor], total_key: str) -> dict:
    """Update optimizer `name` from the sum of `terms` -> the logs: the sum as `total_key` and each
    term, detached (a GAN's generator step, whatever its terms)."""
    loss = total_loss(terms)
    optim.update(loss, name)
    return {total_key: loss.detach(), **{key: value.detach() for key, value in terms.items()}}


def average_logs(logs: list[dict]) -> dict:
    """Each key's mean over the micro-batches that logged it."""
    if len(logs) == 1:
        return logs[0]
    sums: dict = {}
    counts: dict = {}
    for entry in logs:
        for key, value in entry.items():
            sums[key] = sums[key] + value if key in sums else value
            counts[key] = counts.get(key, 0) + 1
    return {key: value / counts[key] for key, value in sums.items()}


def micro_step(optim: UpdatesNetworks, index: int, total: int):
    """Micro-batch `index` of `total` (`optim.micro_step`); nothing to enter for a lone batch."""
    return optim.micro_step(index, total) if total > 1 else nullcontext()


def _upgrade_on_load(module: Task, state: dict, prefix: str, *_) -> None:
    if not prefix:  # the task itself is being loaded (not as a part of something else)
        module.upgrade_state_dict(state)


def rename_prefix(state: dict, old: str, new: str) -> None:
    """Rename the keys of `state` that start with `old` to start with `new`, in place."""
    for key in [key for key in state if key.startswith(old)]:
        state[new + key[len(old):]] = state.pop(key)


CONDITIONINGS = ("image", "unpaired", "noise", "labels")


class GeneratorTask(derived.GeneratorSaliency, Task):
    """A task whose product is a generator (a GAN): what inference/, export, analysis and the
    tools ask of it.

    conditioning       what the generator takes: "image" (an image to translate, trained on
                       pairs: pix2pix), "unpaired" (an image of one domain, trained without pairs:
                       CycleGAN), "noise" (DCGAN), "labels" (a label map and noise: semantic
                       synthesis)
    directions         the names of its generators when it has several (CycleGAN's "AtoB",
                       "BtoA"); () for one generator
    noise_shape        one sample's noise (latent_dim, 1, 1), or None when it takes no noise
    generator_for(direction)   the generator to evaluate and deploy: its EMA copy when kept
    generator_inputs(batch, height, width, seed)   example inputs of that generator, in its
                       own scale (images in [-1, 1], noise)
    """

    conditioning: ClassVar[str] = "image"
    directions: ClassVar[tuple[str, ...]] = ()

    @property
    def noise_shape(self) -> tuple[int, ...] | None:
        return None

    def generator_for(self, direction: str | None = None) -> nn.Module:
        raise NotImplementedError

    def visualize(self, batch: dict, outputs: dict, max_images: int) -> dict:
        """A row per sample of val_step's "input" | "fake" | "real" images (those it returns)."""
        return derived.sample_rows(self, outputs, max_images)

    def save_visuals(self, batch: dict, outputs: dict, folder) -> None:
        """<name>.png per sample: val_step's "input" | "fake" | "real" images side by side."""
        derived.write_pictures(self, batch, outputs, folder)

    def check_direction(self, direction: str | None) -> str | None:
        """`direction` if this task has a generator of that name (None for a one-generator task),
        else a ConfigError saying what it has."""
        name = type(self).__name__
        if not self.directions:
            if direction is not None:
                raise ConfigError(f"--direction: {name} has one generator; --direction is for a task that "
                                 "translates both ways (CycleGANTask)")
            return None
        if direction not in self.directions:
            raise ConfigError(f"--direction: {name} translates both ways; choose {' or '.join(self.directions)}"
                             + ("" if direction is None else f", not {direction!r}"))
        return direction

    def generator_inputs(self, batch: int, height: int, width: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
        """Example inputs of the evaluation generator (batch x channels x height x width images
        in [-1, 1], or noise), drawn from `seed`."""
        draw = torch.Generator().manual_seed(seed)
        if self.conditioning == "noise":
            return (torch.randn(batch, *self.noise_shape, generator=draw),)
        return (torch.rand(batch, 3, height, width, generator=draw) * 2 - 1,)

    def deployable(self, direction: str | None = None) -> tuple[nn.Module, str, int]:
        from framework.inference.export import ImageTranslator, NoiseToImage
        from framework.inference.settings import network_size_divisor

        generator = self.generator_for(direction)
        if self.conditioning == "noise":
            return NoiseToImage(generator, self.noise_shape[0]).eval(), "noise", self.noise_shape[0]
        return ImageTranslator(generator).eval(), "image", network_size_divisor(generator)
