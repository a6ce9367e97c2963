"""The EMA generator's BatchNorm statistics, re-estimated before it is evaluated, saved or exported
(OASIS's way: its utils/utils.py, `update_EMA`).

Why: the EMA averages the generator's weights, but its BatchNorm running statistics are the live
generator's (`update_ema` copies every buffer), gathered on the live weights' activations, not the
average's. Evaluated with them, the average normalises with the wrong means and variances (0.04
mean absolute difference on outputs of 0.23 in a toy run, issue 50). OASIS runs the EMA generator
over training batches in train mode under no_grad before every FID computation, image and
checkpoint save.

How, here: the task remembers what the generator was given in the last `batches` training
(micro-)batches (`remember`, compact integers on the device: SemanticSynthesisTask the label maps,
GANTask the input images, or for a generator from noise only the batch size). `refresh(network,
run, seed)`, when the EMA moved since the last refresh, resets every BatchNorm's running
statistics, sets its momentum to None (a cumulative average: every remembered batch counts the
same) and calls `run(remembered, draw)` on each (the task's forward of the EMA generator, its noise
from `draw`, a torch.Generator seeded by the EMA's update count) under no_grad with only the
BatchNorm modules in train mode (everything else in eval: spectral norm's power iteration and
dropout stay still), then puts each module's mode and momentum back.

Where it runs: the tasks' `generator_for` (evaluation's val_step, export's deployable,
analyze_model's network_examples) and their `state_dict` (checkpoints, the evaluation hook's
finiteness check), so whatever is evaluated, saved or exported holds re-estimated statistics.

Resume stays exact: the refresh draws nothing from the training random stream and touches only the
EMA copy's buffers, which the next EMA update overwrites with the live generator's (training never
reads them); the remembered maps are each process's own state (`state_dict` here, the task's
`rank_state_dict` in the checkpoint), so a resumed run refreshes from the same maps with the same
noise. Under DDP each process re-estimates from its own batches; the checkpoint holds rank 0's.

Deviations from OASIS, and why: OASIS does not reset the statistics and runs 51 batches with
BatchNorm's momentum 0.1 (an exponential average that starts from the averaged statistics; 0.9^51
of them remain) on batches of a new pass over the training loader with new noise; here the
average is cumulative (equal weights, nothing of the live generator's statistics left) over the
training batches most recently seen, because drawing new batches would move the loader's and the
global random streams and so break exact resume.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

import torch
from torch import nn

from framework.dist import unwrap

BATCHES = 50  # OASIS runs 51 forward passes (`num_upd > 50`)


def batch_norms(network: nn.Module) -> list[nn.modules.batchnorm._BatchNorm]:
    """The modules that keep running statistics of their batches."""
    return [module for module in network.modules()
            if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.track_running_stats]


def check_batches(batches) -> int:
    if isinstance(batches, bool) or not isinstance(batches, int) or batches < 0:
        raise ValueError(f"ema_bn_batches must be an integer >= 0 (0: keep the live generator's statistics), "
                         f"got {batches!r}")
    return batches


class EMABatchNorm(nn.Module):
    """No parameters or buffers (a module so that the engine's start-up check restores `stale`)."""

    def __init__(self, network: nn.Module | None, batches: int, value_range: tuple[int, int] = (0, 255)):
        """`network`: the EMA generator (None: no EMA, nothing to do); `value_range`: the smallest
        and largest value `remember` will be given (bytes when they fit)."""
        super().__init__()
        self.active = bool(check_batches(batches)) and network is not None and bool(batch_norms(network))
        self.compact = torch.uint8 if 0 <= value_range[0] and value_range[1] <= 255 else torch.int32
        self.labels: collections.deque[torch.Tensor] = collections.deque(maxlen=max(batches, 1))
        self.stale = False  # the EMA moved since the statistics were last re-estimated

    def remember(self, inputs: torch.Tensor) -> None:
        """After each EMA update: what one (micro-)batch gave the generator (integers: label maps,
        uint8 images, or an N x 0 tensor for a batch of noise)."""
        if self.active:
            self.labels.append(inputs.detach().to(self.compact, copy=True))
            self.stale = True

    @torch.no_grad()
    def refresh(self, network: nn.Module, run: Callable[[torch.Tensor, torch.Generator], object], seed: int) -> None:
        """Re-estimate `network`'s BatchNorm statistics by `run` on each remembered batch, if the EMA moved."""
        if not (self.active and self.stale and self.labels):
            return
        self.stale = False
        norms = batch_norms(network)
        modes = [(module, module.training) for module in network.modules()]
        momenta = [norm.momentum for norm in norms]
        draw = torch.Generator().manual_seed(seed)
        try:
            network.eval()
            for norm in norms:
                norm.reset_running_stats()
                norm.momentum = None
                norm.train()
            for remembered in self.labels:
                run(remembered, draw)
        finally:
            for module, training in modes:
                module.training = training
            for norm, momentum in zip(norms, momenta):
                norm.momentum = momentum

    def state(self) -> dict:
        return {"labels": [labels.cpu() for labels in self.labels]} if self.active else {}

    def load_state(self, state: dict, device: torch.device) -> None:
        self.labels.clear()
        self.labels.extend(labels.to(device) for labels in state.get("labels", []))


class ReestimatedEMAState:
    """A task mix-in (before GeneratorTask in its bases) for a task with `ema` and `ema_batchnorm`:
    its `state_dict` holds the EMA generator with re-estimated statistics, as evaluation and export
    use it (the task's `generator_for` refreshes them), and the remembered batches are each
    process's own state in the checkpoint (`rank_state_dict`). Its `generator_for` is the one-generator
    lookup both GAN and semantic-synthesis tasks use: the EMA copy (statistics refreshed) where kept."""

    def generator_for(self, direction: str | None = None) -> nn.Module:
        self.check_direction(direction)
        if self.ema is None:
            return unwrap(self.generator)
        self.ema_batchnorm.refresh(self.ema["generator"], self.refresh_pass, self.ema.updates.value)
        return self.ema["generator"]

    def state_dict(self, *args, **kwargs):
        if self.ema is not None:
            self.generator_for()
        return super().state_dict(*args, **kwargs)

    def rank_state_dict(self) -> dict:
        return {"ema_bn": self.ema_batchnorm.state()} if self.ema_batchnorm.active else {}

    def load_rank_state_dict(self, state: dict) -> None:
        self.ema_batchnorm.load_state(state.get("ema_bn", {}), next(self.parameters()).device)
