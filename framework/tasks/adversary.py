"""One discriminator's side of a GAN, used by every GAN task (the CycleGAN code's
`backward_D_basic(netD, real, fake)`: one piece for every discriminator, the network passed in).

    adversary = Adversary("hinge", d_weight=0.5, r1_weight=1.0, r1_interval=4, augment=DiffAugment(...))
    adversary.start_d_step()                                   # once per D update: lazy R1 due?
    loss_d, logs = adversary.d_loss(discriminator, real, fake.detach(), condition)   # per micro-batch
    optim.update(loss_d, "discriminator")
    logs |= adversary.adapt()                                  # once per D update: ADA's p
    adversarial, matching = adversary.g_loss(discriminator, fake, condition, real)  # D frozen inside

What it owns: the adversarial loss (a registry entry, framework/losses/gan.py, which declares
whether it needs a gradient penalty and whether D's loss is bounded below), its weights
(`d_weight` on D's real and fake terms, `adv_weight` on the generator's, `gp_weight`), lazy R1,
the DiffAugment that everything D sees goes through (its adaptive p fed with D's verdicts on the
reals of every micro-batch of a D step), feature matching, D's diagnostics and the health check
that reads them, and the count of D steps (checkpointed, so lazy R1 and ADA resume exactly).

What it never owns: the discriminator. Each call is handed the network, because DDP wrapping
replaces the task's attribute and the optimizers pick parameters by the task's child names.
The adversary holds buffers only (DiffAugment's p and sums, the D-step count):
it is checkpointed with the task and is in no optimizer and no DDP wrapper.

`suffix` names the discriminator in the logs when a task has several (CycleGAN's "_a", "_b":
loss_d_a, d_real_logit_a, ada_p_a, ...).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from framework.losses.gan import AdversarialLoss, adversarial_loss, gradient_penalty, sample_verdicts
from framework.tasks.discriminator_step import LazyR1, d_diagnostics, d_input_pair, judge_fake_for_generator
from framework.tasks.gan_health import GANHealth
from framework.tasks.parts import Counter, frozen, total_loss


def check_weight(key: str, value: float) -> float:
    """`value` if it is a finite number >= 0, else a ValueError naming `key` (NaN included)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{key} must be a finite number >= 0, got {value!r}")
    return float(value)


def check_segmenter_outputs(discriminator: nn.Module, num_classes: int) -> None:
    """A loss that reads labels (OASIS's) scores D's per-pixel logits as the num_classes true
    classes and, last, "fake": with any other count a real class doubles as "fake" (too few) or
    outputs train on nothing (too many), without a word. Read from D's `num_classes` or
    `out_channels` where it declares one, else from its first output (a hook that removes itself)."""
    wanted = num_classes + 1

    def refuse(outputs: int) -> None:
        if outputs != wanted:
            raise ValueError(f"task.discriminator has {outputs} outputs per pixel; a loss that reads labels needs "
                             f"task.num_classes + 1 = {wanted} ({num_classes} classes and \"fake\"): set the "
                             f"discriminator's num_classes to {wanted}")

    network = getattr(discriminator, "module", discriminator)
    declared = next((getattr(network, key) for key in ("num_classes", "out_channels")
                     if isinstance(getattr(network, key, None), int)), None)
    if declared is not None:
        refuse(declared)
        return

    def first_output(module, inputs, output) -> None:
        handle.remove()
        if isinstance(output, torch.Tensor) and output.ndim == 4:
            refuse(output.shape[1])
    handle = network.register_forward_hook(first_output)


def refuse_with_labels(augment: nn.Module | None, r1_weight: float) -> None:
    """What a loss that reads labels (OASIS's per-pixel CE) cannot be combined with, one line each.
    DiffAugment moves the image D sees (translation, cutout) but not the label map its pixels are
    scored against, so D would learn the wrong class at the moved pixels; ADA's p reads the same
    augmented verdicts. R1 and ADA's statistic read each sample's mean logit over all N + 1
    outputs, which the class-balanced CE does not depend on (adding a constant to every logit of a
    pixel leaves it unchanged): R1 would smooth something the loss never scores. The official
    OASIS code uses neither."""
    if augment is not None:
        raise ValueError("d_augment: a loss that reads labels (gan_loss: oasis) scores D's pixels against the label "
                         "map, which d_augment's transforms would move away from the image; remove d_augment")
    if isinstance(r1_weight, (int, float)) and r1_weight > 0:
        raise ValueError("r1_weight: R1 penalises the gradient of D's mean logit, which a loss that reads labels "
                         "(gan_loss: oasis) does not score; use r1_weight: 0")


class Adversary(nn.Module):
    def __init__(self, gan_loss: str | AdversarialLoss = "vanilla", d_weight: float = 1.0, adv_weight: float = 1.0,
                 gp_weight: float = 10.0, r1_weight: float = 0.0, r1_interval: int = 1,
                 augment: nn.Module | None = None, feature_matching: nn.Module | None = None, suffix: str = "",
                 has_labels: bool = False):
        super().__init__()
        self.loss = adversarial_loss(gan_loss)
        if self.loss.reads_labels and not has_labels:  # known now, not at the first iteration
            raise ValueError(f"gan_loss: {type(self.loss).__name__} reads a label map, which this task's batches do "
                             "not have (SemanticSynthesisTask's do)")
        if self.loss.reads_labels:
            refuse_with_labels(augment, r1_weight)
        self.d_weight = check_weight("d_weight", d_weight)
        self.adv_weight = check_weight("adv_weight", adv_weight)
        self.gp_weight = check_weight("gp_weight", gp_weight)
        self.r1 = LazyR1(r1_weight, r1_interval)
        self.augment = augment
        self.feature_matching = feature_matching
        self.health = GANHealth(watch_d_loss=self.loss.bounded_below, suffix=suffix)
        self.suffix = suffix
        self.d_steps = Counter()  # D updates done
        self._r1_due = False
        self._verdicts: list[torch.Tensor] = []  # D's verdicts on the reals of this D step's micro-batches

    @property
    def uses_double_backward(self) -> bool:
        """A penalty differentiates D's input gradient (which SyncBatchNorm cannot)."""
        return self.loss.needs_gradient_penalty or self.r1.enabled

    def start_d_step(self) -> int:
        """Count one D update (call once per update, before its micro-batches); its number, 1, 2, ..."""
        steps = self.d_steps.increment()
        self._r1_due = self.r1.due(steps)
        return steps

    def d_loss(self, discriminator: nn.Module, real: torch.Tensor, fake: torch.Tensor,
               condition: torch.Tensor | None = None, details: bool = True,
               labels: torch.Tensor | None = None, regularizer=None) -> tuple[torch.Tensor, dict]:
        """D's loss on one (micro-)batch of reals and (detached) fakes, both seen with `condition`
        (concatenated along the channels) and through the DiffAugment -> (loss, logs). `details`:
        add D's diagnostics (a few reductions: on logged iterations only). `labels`: the label map
        for a loss that reads it (OASIS). `regularizer(real_output, fake_output)`: a task's own D terms
        on D's outputs ({name: weighted term}, e.g. OASIS's LabelMix), added to the loss."""
        def critic(image):
            return discriminator(d_input_pair(condition, image, self.augment))

        s = self.suffix
        penalties = {}
        if self._r1_due:  # D's pass on the reals in float32, its input gradient kept
            real_output, penalties[f"loss_d_r1{s}"] = self.r1.real_pass(critic, real)
        else:
            real_output = critic(real)
        fake_output = critic(fake)
        loss_real, loss_fake = self.loss.discriminator(real_output, fake_output, self._labels(labels))
        terms = {f"loss_d_real{s}": self.d_weight * loss_real, f"loss_d_fake{s}": self.d_weight * loss_fake,
                 **penalties}
        if self.loss.needs_gradient_penalty:
            terms[f"loss_d_gp{s}"] = self.gp_weight * gradient_penalty(critic, real, fake)
        if regularizer is not None:
            terms.update(regularizer(real_output, fake_output))
        loss = total_loss(terms)
        logs = {f"loss_d{s}": loss.detach(), **{key: value.detach() for key, value in terms.items()}}
        if details:
            logs.update(d_diagnostics(real_output, fake_output, fake, suffix=s))
        if self.augment is not None:
            self._verdicts.append(sample_verdicts(real_output).detach())
        return loss, logs

    def adapt(self) -> dict:
        """ADA, once per D step after its update: the DiffAugment reads D's verdicts on the reals of
        every micro-batch, so an accumulated step counts as one step of the whole batch (`interval`
        counts D steps) and every micro-batch of a step sees the same p. Logs p."""
        if self.augment is None:
            return {}
        self.augment.observe(torch.cat(self._verdicts))
        self._verdicts.clear()
        return {f"ada_p{self.suffix}": self.augment.p.detach().clone()}

    def g_loss(self, discriminator: nn.Module, fake: torch.Tensor, condition: torch.Tensor | None = None,
               real: torch.Tensor | None = None,
               labels: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(adv_weight x the generator's adversarial term, the feature-matching term or None),
        with D frozen (it collects no gradients, and its DDP wrapper is bypassed). Feature
        matching compares D's features on `fake` and on `real` under one augmentation draw."""
        matching = None
        with frozen(discriminator) as network:
            fake_output, real_output = judge_fake_for_generator(network, condition, fake, real, self.augment,
                                                                with_real=self.feature_matching is not None)
            adversarial = self.adv_weight * self.loss.generator(fake_output, self._labels(labels))
            if self.feature_matching is not None:
                matching = self.feature_matching(fake_output, real_output)
        return adversarial, matching

    def _labels(self, labels: torch.Tensor | None) -> torch.Tensor | None:
        if self.loss.reads_labels and labels is None:
            raise ValueError(f"{type(self.loss).__name__} reads the label map, which this task does not give it")
        return labels

    def diagnose(self, logged: dict[str, float]) -> list[str]:
        return self.health.check(logged)
