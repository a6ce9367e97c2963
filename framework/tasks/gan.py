"""GANs: a generator and a discriminator, each updated by its own named optimizer.

One training iteration (one batch):

    fake = generator(input or noise)
    D step:  loss_d_real + loss_d_fake (+ loss_d_gp, + loss_d_r1 every r1_interval-th step)
             on real and fake.detach(), each through DiffAugment when `d_augment` is set
             optim.update(loss_d, "discriminator")
    G step:  every `d_steps_per_g_step`-th iteration, with the discriminator frozen
             (its parameters collect no gradients): loss_g_adv (+ loss_g_l1, loss_g_fm,
             loss_g_vgg); optim.update(loss_g, "generator"); then the EMA generator follows

The discriminator may return a logit tensor or a multi-scale output (MultiScaleDiscriminator):
the adversarial losses average over its scales, feature matching reads its features. The
pieces a CycleGAN task shares (lazy R1, the DDP tie, augmented pairs) are in
framework/tasks/discriminator_step.py.

The D step backpropagates through the detached fake only, so the G step's backward is the
first and only one through the generator's graph (no retain_graph).

With gradient accumulation (train.accumulate N), an iteration is: every micro-batch's D
terms (fakes drawn without a graph), the D step; then every micro-batch's G terms, the G
step, so the G step sees the discriminator after its update, as with one batch N times as
large. The G phase draws each fake again from the same input or noise, replaying the random
state (dropout) and keeping the generator's normalisation statistics as the D phase left them,
so both phases see the same fakes. An adaptive DiffAugment reads the verdicts of every
micro-batch once, after the D step (`adapt_augment`), as CycleGANTask's do: its `interval`
counts D steps, and all micro-batches of a step are augmented with the same p.

Two modes, chosen by `latent_dim`:
- conditional (latent_dim null, e.g. pix2pix): batches hold "input" and "target" uint8 images;
  G maps input -> target; D sees (input, image) concatenated along the channels.
- unconditional (latent_dim N, e.g. DCGAN): batches hold "image"; G maps N x latent_dim x 1 x 1
  noise to images; D sees the image alone.

Images arrive as uint8 and are mapped to [-1, 1] here, on the device; generators end in tanh.
`val_step` returns {"fake", "real"} (and "input" when conditional) as float images in [0, 1],
which the image metrics (PSNR, SSIM, L1, FID) read. Evaluation and samples use the EMA
generator when `ema_decay` is set.
"""

from __future__ import annotations

import contextlib
import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from framework.inference.generator import to_signed, to_unit
from framework.losses.gan import GANLoss, gradient_penalty, sample_verdicts
from framework.registry import TASKS
from framework.tasks.base import Task, average_logs, frozen, total_loss, unwrap
from framework.tasks.discriminator_step import LazyR1, d_diagnostics, d_input_pair, judge_fake_for_generator
from framework.tasks.ema import update_ema
from framework.tasks.gan_health import GANHealth
from framework.tasks.replay import random_state, replaying
from framework.visualization.panels import side_by_side, stack_rows, write_named_pngs


@TASKS.register()
class GANTask(Task):
    """A GAN trained with two named optimizers, `generator` and `discriminator`.

    gan_loss            vanilla | lsgan | hinge | wgan-gp (framework/losses/gan.py)
    adv_weight          weight of the generator's adversarial loss
    l1_weight           weight of the L1 reconstruction loss |G(input) - target| (conditional only)
    d_weight            weight of the discriminator's real and fake terms (pix2pix uses 0.5)
    gp_weight           weight of the gradient penalty (wgan-gp only)
    r1_weight           R1 penalty gamma (0: none): weight / 2 x E||grad D(real)||^2
    r1_interval         apply R1 every k-th D step, multiplied by k (lazy regularisation)
    d_augment           null or {type: DiffAugment, ...}: what D sees, real and fake, augmented
    feature_matching    null or {type: FeatureMatchingLoss, weight: 10}: needs a D with features
    perceptual          null or {type: VGGPerceptualLoss, ...}: conditional only (needs targets)
    d_steps_per_g_step  discriminator updates per generator update (one D update per iteration)
    ema_decay           keep an exponential moving average of the generator (e.g. 0.999), used
                        for evaluation and samples; null: no EMA
    ema_start           generator updates during which the EMA just copies the generator
    latent_dim          noise channels of an unconditional generator; null: conditional
    num_fixed_samples   unconditional: size of the fixed-noise grid drawn at every evaluation
    noise_seed          seed of the fixed noise (evaluation noise is seeded by sample index)
    """

    required_optimizers = ("generator", "discriminator")

    def __init__(self, generator: nn.Module, discriminator: nn.Module, gan_loss: str = "vanilla",
                 adv_weight: float = 1.0, l1_weight: float = 0.0, d_weight: float = 1.0, gp_weight: float = 10.0,
                 d_steps_per_g_step: int = 1, ema_decay: float | None = None, ema_start: int = 0,
                 latent_dim: int | None = None, num_fixed_samples: int = 64, noise_seed: int = 0,
                 r1_weight: float = 0.0, r1_interval: int = 1, d_augment: nn.Module | None = None,
                 feature_matching: nn.Module | None = None, perceptual: nn.Module | None = None):
        super().__init__()
        self.generator = generator
        self.discriminator = discriminator
        self.gan_loss = GANLoss(gan_loss)
        if latent_dim is not None and latent_dim < 1:
            raise ValueError(f"latent_dim must be a positive number of noise channels or null, got {latent_dim}")
        if latent_dim is not None and l1_weight:
            raise ValueError("l1_weight: the L1 reconstruction loss needs paired targets; "
                             "an unconditional GAN (latent_dim set) has none")
        if latent_dim is not None and perceptual is not None:
            raise ValueError("perceptual: the perceptual loss needs paired targets; "
                             "an unconditional GAN (latent_dim set) has none")
        self.r1 = LazyR1(r1_weight, r1_interval)
        self.d_augment = d_augment
        self.feature_matching = feature_matching
        self.perceptual = perceptual
        if not isinstance(d_steps_per_g_step, int) or d_steps_per_g_step < 1:
            raise ValueError(f"d_steps_per_g_step must be a positive integer, got {d_steps_per_g_step!r}")
        if ema_decay is not None and not 0.0 <= ema_decay < 1.0:
            raise ValueError(f"ema_decay must be in [0, 1) or null, got {ema_decay}")
        self.adv_weight = adv_weight
        self.l1_weight = l1_weight
        self.d_weight = d_weight
        self.gp_weight = gp_weight
        self.d_steps_per_g_step = d_steps_per_g_step
        self.ema_decay = ema_decay
        self.ema_start = ema_start
        self.latent_dim = latent_dim
        if ema_decay is not None:
            # A submodule without trainable parameters: checkpointed, but in no optimizer.
            self.generator_ema = copy.deepcopy(generator).requires_grad_(False)
        # Iterations (D updates) done: counted in a python int so deciding on a G step never
        # waits for the device, and stored in a buffer when saved so it is checkpointed.
        self.register_buffer("d_steps", torch.zeros((), dtype=torch.int64))
        self._d_steps: int | None = None
        self.register_load_state_dict_post_hook(lambda module, _: setattr(module, "_d_steps", None))
        self.health = GANHealth(watch_d_loss=gan_loss != "wgan-gp")
        self._r1_due = False
        if latent_dim is not None:
            noise = torch.randn(num_fixed_samples, latent_dim, 1, 1, generator=torch.Generator().manual_seed(noise_seed))
            self.register_buffer("fixed_noise", noise)

    @property
    def conditional(self) -> bool:
        return self.latent_dim is None

    @property
    def uses_double_backward(self) -> bool:
        """A penalty differentiates D's input gradient (which SyncBatchNorm cannot)."""
        return self.gan_loss.needs_gradient_penalty or self.r1.enabled

    # ------------------------------------------------------------------ training

    def train_iteration(self, batches: list[dict], optim) -> dict:
        steps = self._count_d_step()
        g_step = steps % self.d_steps_per_g_step == 0
        self._r1_due = self.r1.due(steps)
        if len(batches) == 1:
            logs = self._one_batch(batches[0], optim, g_step)
        else:
            logs = self._accumulated(batches, optim, g_step)
        if g_step and self.ema_decay is not None:
            self.update_ema(steps // self.d_steps_per_g_step)
        return logs

    def diagnose(self, logged: dict[str, float]) -> list[str]:
        return self.health.check(logged)

    def train_step(self, batch: dict, optim) -> dict:
        """One whole iteration on one batch (a GAN's iteration is not a sum over micro-batches)."""
        return self.train_iteration([batch], optim)

    def _one_batch(self, batch: dict, optim, g_step: bool) -> dict:
        condition, real = self.unpack(batch)
        # Without a G step this iteration, the generator's graph would only be thrown away.
        with contextlib.nullcontext() if g_step else torch.no_grad():
            fake = self.generator(self.generator_input(condition, real.shape[0], real.device))
        logs, verdicts = self.discriminator_step(condition, real, fake.detach(), optim)
        logs.update(self.adapt_augment([verdicts]))
        if g_step:
            logs.update(self.generator_step(condition, real, fake, optim))
        return logs

    def _accumulated(self, batches: list[dict], optim, g_step: bool) -> dict:
        """All D micro-batches and the D step, then all G micro-batches and the G step."""
        inputs = [self.unpack(batch) for batch in batches]
        drawn, d_logs, verdicts = [], [], []
        for index, (condition, real) in enumerate(inputs):
            with optim.micro_step(index, len(batches)):
                noise_or_input = self.generator_input(condition, real.shape[0], real.device)
                rng = random_state(real.device)
                with torch.no_grad():
                    fake = self.generator(noise_or_input)
                drawn.append((noise_or_input, rng))
                micro_logs, micro_verdicts = self.discriminator_step(condition, real, fake, optim)
            d_logs.append(micro_logs)
            verdicts.append(micro_verdicts)
        logs = {**average_logs(d_logs), **self.adapt_augment(verdicts)}
        if g_step:
            g_logs = []
            for index, ((condition, real), (noise_or_input, rng)) in enumerate(zip(inputs, drawn)):
                with optim.micro_step(index, len(batches)):
                    with replaying(rng, unwrap(self.generator)):
                        fake = self.generator(noise_or_input)
                    g_logs.append(self.generator_step(condition, real, fake, optim))
            logs.update(average_logs(g_logs))
        return logs

    def discriminator_step(self, condition, real: torch.Tensor, fake: torch.Tensor,
                           optim) -> tuple[dict, torch.Tensor | None]:
        """The D update's terms on one (micro-)batch -> (logs, D's per-sample verdicts on the reals
        for the DiffAugment; None without one)."""
        def critic(image):
            return self.discriminate(condition, image)

        penalties = {}
        if self._r1_due:  # D's pass on the reals in float32, its input gradient kept
            real_logits, penalties["loss_d_r1"] = self.r1.real_pass(critic, real)
        else:
            real_logits = critic(real)
        fake_logits = critic(fake)
        loss_real, loss_fake = self.gan_loss.discriminator(real_logits, fake_logits)
        terms = {"loss_d_real": self.d_weight * loss_real, "loss_d_fake": self.d_weight * loss_fake, **penalties}
        if self.gan_loss.needs_gradient_penalty:
            terms["loss_d_gp"] = self.gp_weight * gradient_penalty(critic, real, fake)
        loss = total_loss(terms)
        optim.update(loss, "discriminator")
        logs = {"loss_d": loss.detach(), **{k: v.detach() for k, v in terms.items()}}
        if getattr(optim, "log_details", True):  # on logged iterations only: a few reductions
            logs.update(d_diagnostics(real_logits, fake_logits, fake))
        return logs, (sample_verdicts(real_logits).detach() if self.d_augment is not None else None)

    def adapt_augment(self, verdicts: list[torch.Tensor | None]) -> dict:
        """ADA, once per D step: the adaptive DiffAugment reads D's verdicts on the reals of
        every micro-batch, so that an accumulated step counts as one step of the whole batch
        (`interval` counts D steps) and every micro-batch of a step sees the same p."""
        if self.d_augment is None:
            return {}
        self.d_augment.observe(torch.cat(verdicts))
        return {"ada_p": self.d_augment.p.detach().clone()}

    def generator_step(self, condition, real: torch.Tensor, fake: torch.Tensor, optim) -> dict:
        with frozen(self.discriminator) as discriminator:  # D collects no gradients here
            fake_output, real_output = judge_fake_for_generator(discriminator, condition, fake, real, self.d_augment,
                                                                with_real=self.feature_matching is not None)
            terms = {"loss_g_adv": self.adv_weight * self.gan_loss.generator(fake_output)}
            if self.feature_matching is not None:
                terms["loss_g_fm"] = self.feature_matching(fake_output, real_output)
        if self.l1_weight:
            terms["loss_g_l1"] = self.l1_weight * F.l1_loss(fake, real)
        if self.perceptual is not None:
            terms["loss_g_vgg"] = self.perceptual(fake, real)
        loss = total_loss(terms)
        optim.update(loss, "generator")
        return {"loss_g": loss.detach(), **{k: v.detach() for k, v in terms.items()}}

    @torch.no_grad()
    def update_ema(self, g_steps: int) -> None:
        """EMA <- decay * EMA + (1 - decay) * G (a plain copy for the first `ema_start` G updates)."""
        update_ema(self.generator_ema, unwrap(self.generator), self.ema_decay, copy_only=g_steps <= self.ema_start)

    def _count_d_step(self) -> int:
        if self._d_steps is None:  # first step, or just loaded from a checkpoint
            self._d_steps = int(self.d_steps)
        self._d_steps += 1
        return self._d_steps

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        if self._d_steps is not None:  # the buffer follows the python counter when saved, not per step
            self.d_steps.fill_(self._d_steps)
        super()._save_to_state_dict(destination, prefix, keep_vars)

    # ------------------------------------------------------------------ shared pieces

    def unpack(self, batch: dict) -> tuple[torch.Tensor | None, torch.Tensor]:
        """(condition or None, real image), as floats in [-1, 1]."""
        if self.conditional:
            return to_signed(batch["input"]), to_signed(batch["target"])
        return None, to_signed(batch["image"])

    def generator_input(self, condition, batch_size: int, device: torch.device) -> torch.Tensor:
        if self.conditional:
            return condition
        return torch.randn(batch_size, self.latent_dim, 1, 1, device=device)

    def discriminator_input(self, condition, image: torch.Tensor) -> torch.Tensor:
        """What D sees, without augmentation: the image, or condition and image concatenated."""
        return d_input_pair(condition, image)

    def discriminate(self, condition, image: torch.Tensor):
        """The discriminator's output on the (augmented) pair, through the (possibly
        DDP-wrapped) trained network."""
        return self.discriminator(d_input_pair(condition, image, self.d_augment))

    @property
    def eval_generator(self) -> nn.Module:
        return self.generator_ema if self.ema_decay is not None else unwrap(self.generator)

    def evaluation_noise(self, indices: torch.Tensor) -> torch.Tensor:
        """Noise seeded by each sample's dataset index: the same fakes in every evaluation,
        whichever process or batch evaluates the sample."""
        noise = [torch.randn(self.latent_dim, 1, 1, generator=torch.Generator().manual_seed(int(i)))
                 for i in indices.tolist()]
        return torch.stack(noise).to(indices.device)

    # ------------------------------------------------------------------ evaluation

    def val_step(self, batch: dict) -> dict:
        condition, real = self.unpack(batch)
        if self.conditional:
            fake = self.eval_generator(condition)
            return {"fake": to_unit(fake), "real": to_unit(real), "input": to_unit(condition)}
        fake = self.eval_generator(self.evaluation_noise(batch["index"]))
        return {"fake": to_unit(fake), "real": to_unit(real)}

    def visualize(self, batch: dict, outputs: dict, max_images: int) -> dict:
        """Conditional: a row per sample of input | output | target. Unconditional: the
        generator's images for the fixed noise, in a square grid."""
        if self.conditional:
            panels = side_by_side(outputs["input"], outputs["fake"], outputs["real"])
            return {"samples": stack_rows(panels, max_images)}
        samples = to_unit(self.eval_generator(self.fixed_noise))
        from torchvision.utils import make_grid  # torchvision's import costs ~1 s: only when drawing

        return {"samples": make_grid(samples, nrow=math.ceil(math.sqrt(samples.shape[0])), padding=2)}

    def save_visuals(self, batch: dict, outputs: dict, folder) -> None:
        """Conditional: <name>.png with input | output | target. Unconditional: fake_<index>.png."""
        if self.conditional:
            panels = side_by_side(outputs["input"], outputs["fake"], outputs["real"])
            write_named_pngs(folder, batch["name"], panels)
        else:
            names = [f"fake_{index:06d}" for index in batch["index"].tolist()]
            write_named_pngs(folder, names, outputs["fake"])

