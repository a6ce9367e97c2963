"""GANs: a generator and a discriminator, each updated by its own named optimizer, built on the
GAN parts (framework/tasks/adversary.py, ema.py).

One training iteration (one batch):

    fake = generator(input or noise)
    D step:  the adversary's D loss on real and fake.detach() (its terms, lazy R1, WGAN-GP's
             penalty, DiffAugment); optim.update(loss_d, "discriminator"); the adaptive p moves
    G step:  every `d_steps_per_g_step`-th iteration, with the discriminator frozen: loss_g_adv
             (+ loss_g_fm, loss_g_l1, loss_g_vgg); optim.update(loss_g, "generator"); the EMA follows

The D step backpropagates through the detached fake only, so the G step's backward is the
first and only one through the generator's graph (no retain_graph).

With gradient accumulation (train.accumulate N), an iteration is: every micro-batch's D
terms (fakes drawn without a graph), the D step; then every micro-batch's G terms, the G
step, so the G step sees the discriminator after its update, as with one batch N times as
large. The G phase draws each fake again from the same input or noise, replaying the random
state (dropout) and keeping the generator's normalisation statistics as the D phase left them,
so both phases see the same fakes.

Two modes, chosen by `latent_dim`:
- conditional (latent_dim null, e.g. pix2pix): batches hold "input" and "target" uint8 images;
  G maps input -> target; D sees (input, image) concatenated along the channels.
- unconditional (latent_dim N, e.g. DCGAN): batches hold "image"; G maps N x latent_dim x 1 x 1
  noise to images; D sees the image alone.

Images arrive as uint8 and are mapped to [-1, 1] here, on the device; generators end in tanh.
`val_step` returns {"fake", "real"} (and "input" when conditional) as float images in [0, 1],
which the image metrics (PSNR, SSIM, L1, FID) read. Evaluation and samples use the EMA
generator when `ema_decay` is set, its BatchNorm statistics (DCGAN's generator has them)
re-estimated first on the last `ema_bn_batches` batches' inputs or noise (framework/tasks/ema_batchnorm.py).
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import nn

from framework.dist import unwrap
from framework.inference.generator import to_signed, to_unit
from framework.inference.noise import item_noise
from framework.registry import TASKS
from framework.tasks.adversary import Adversary, check_weight
from framework.tasks.base import GeneratorTask, average_logs, micro_step, rename_prefix, update_with
from framework.tasks.derived import judged
from framework.tasks.discriminator_step import d_input_pair
from framework.tasks.ema import EMA
from framework.tasks.ema_batchnorm import BATCHES, EMABatchNorm, ReestimatedEMAState, check_batches
from framework.tasks.parts import random_state, replaying
from framework.visualization.panels import side_by_side, stack_rows, write_named_pngs


@TASKS.register()
class GANTask(ReestimatedEMAState, GeneratorTask):
    """A GAN trained with two named optimizers, `generator` and `discriminator`.

    gan_loss            vanilla | lsgan | hinge | wgan-gp, or an AdversarialLoss node (framework/losses/gan.py)
    adv_weight          weight of the generator's adversarial loss
    l1_weight           weight of the L1 reconstruction loss |G(input) - target| (conditional only)
    d_weight            weight of the discriminator's real and fake terms (pix2pix uses 0.5)
    gp_weight           weight of the gradient penalty (a loss that needs one: wgan-gp)
    r1_weight           R1 penalty gamma (0: none): weight / 2 x E||grad D(real)||^2
    r1_interval         apply R1 every k-th D step, multiplied by k (lazy regularisation)
    d_augment           null or {type: DiffAugment, ...}: what D sees, real and fake, augmented
    feature_matching    null or {type: FeatureMatchingLoss, weight: 10}: needs a D with features
    perceptual          null or {type: VGGPerceptualLoss, ...}: conditional only (needs targets)
    d_steps_per_g_step  discriminator updates per generator update (one D update per iteration)
    ema_decay           keep an exponential moving average of the generator (e.g. 0.999), used
                        for evaluation and samples; null: no EMA
    ema_start           generator updates during which the EMA just copies the generator
    ema_bn_batches      the EMA generator's BatchNorm statistics re-estimated on the last this many training
                        batches' inputs (or noise) before it is evaluated, saved or exported; 0: the live G's
    latent_dim          noise channels of an unconditional generator; null: conditional
    num_fixed_samples   unconditional: size of the fixed-noise grid drawn at every evaluation
    noise_seed          seed of the fixed noise (evaluation noise is seeded by sample index)
    """

    required_optimizers = ("generator", "discriminator")

    def __init__(self, generator: nn.Module, discriminator: nn.Module, gan_loss="vanilla",
                 adv_weight: float = 1.0, l1_weight: float = 0.0, d_weight: float = 1.0, gp_weight: float = 10.0,
                 d_steps_per_g_step: int = 1, ema_decay: float | None = None, ema_start: int = 0,
                 latent_dim: int | None = None, num_fixed_samples: int = 64, noise_seed: int = 0,
                 r1_weight: float = 0.0, r1_interval: int = 1, d_augment: nn.Module | None = None,
                 feature_matching: nn.Module | None = None, perceptual: nn.Module | None = None,
                 ema_bn_batches: int = BATCHES):
        super().__init__()
        if latent_dim is not None and latent_dim < 1:
            raise ValueError(f"latent_dim must be a positive number of noise channels or null, got {latent_dim}")
        if latent_dim is not None and l1_weight:
            raise ValueError("l1_weight: the L1 reconstruction loss needs paired targets; "
                             "an unconditional GAN (latent_dim set) has none")
        if latent_dim is not None and perceptual is not None:
            raise ValueError("perceptual: the perceptual loss needs paired targets; "
                             "an unconditional GAN (latent_dim set) has none")
        if not isinstance(d_steps_per_g_step, int) or d_steps_per_g_step < 1:
            raise ValueError(f"d_steps_per_g_step must be a positive integer, got {d_steps_per_g_step!r}")
        self.generator, self.discriminator = generator, discriminator
        self.adversary = Adversary(gan_loss, d_weight, adv_weight, gp_weight, r1_weight, r1_interval,
                                   d_augment, feature_matching)
        self.l1_weight = check_weight("l1_weight", l1_weight)
        self.perceptual = perceptual
        self.d_steps_per_g_step = d_steps_per_g_step
        self.ema = EMA({"generator": generator}, ema_decay, ema_start) if ema_decay is not None else None
        self.ema_batchnorm = EMABatchNorm(None if self.ema is None else self.ema["generator"],
                                          check_batches(ema_bn_batches))
        self.latent_dim = latent_dim
        if latent_dim is not None:
            noise = torch.randn(num_fixed_samples, latent_dim, 1, 1, generator=torch.Generator().manual_seed(noise_seed))
            self.register_buffer("fixed_noise", noise)

    @property
    def conditioning(self) -> str:
        return "image" if self.latent_dim is None else "noise"

    @property
    def conditional(self) -> bool:
        return self.latent_dim is None

    @property
    def noise_shape(self) -> tuple[int, ...] | None:
        return None if self.latent_dim is None else (self.latent_dim, 1, 1)

    @property
    def generator_ema(self) -> nn.Module:
        """The generator's moving average (ema_decay set)."""
        return self.ema["generator"]

    # ------------------------------------------------------------------ training

    def train_step(self, batch: dict, optim) -> dict:
        """One whole iteration on one batch (a GAN's iteration is not a sum over micro-batches)."""
        return self.train_iteration([batch], optim)

    def train_iteration(self, batches: list[dict], optim) -> dict:
        g_step = self.adversary.start_d_step() % self.d_steps_per_g_step == 0
        inputs = [self.unpack(batch) for batch in batches]
        single = len(batches) == 1
        drawn, d_logs = [], []
        for index, (condition, real) in enumerate(inputs):
            with micro_step(optim, index, len(batches)):
                noise_or_input = self.generator_input(condition, real.shape[0], real.device)
                rng = None if single else random_state(real.device)
                # One batch with a G step keeps the fake's graph for it; otherwise none is needed.
                with contextlib.nullcontext() if single and g_step else torch.no_grad():
                    fake = self.generator(noise_or_input)
                drawn.append((noise_or_input, rng, fake))
                loss, logs = self.adversary.d_loss(self.discriminator, real, fake.detach(), condition,
                                                   details=optim.log_details)
                optim.update(loss, "discriminator")
            d_logs.append(logs)
        logs = {**average_logs(d_logs), **self.adversary.adapt()}
        if g_step:
            g_logs = []
            for index, ((condition, real), (noise_or_input, rng, fake)) in enumerate(zip(inputs, drawn)):
                with micro_step(optim, index, len(batches)):
                    if not single:  # the same fake again, now with a graph
                        with replaying(rng, unwrap(self.generator)):
                            fake = self.generator(noise_or_input)
                    g_logs.append(self.generator_step(condition, real, fake, optim))
            logs.update(average_logs(g_logs))
            if self.ema is not None:
                self.ema.update({"generator": self.generator})
                for batch in batches:  # the inputs, or for noise only how many (an N x 0 tensor)
                    given = batch["input"] if self.conditional else batch["image"].new_empty(len(batch["image"]), 0)
                    self.ema_batchnorm.remember(given)
        return logs

    def generator_step(self, condition, real: torch.Tensor, fake: torch.Tensor, optim) -> dict:
        adversarial, matching = self.adversary.g_loss(self.discriminator, fake, condition, real)
        terms = {"loss_g_adv": adversarial}
        if matching is not None:
            terms["loss_g_fm"] = matching
        if self.l1_weight:
            terms["loss_g_l1"] = self.l1_weight * F.l1_loss(fake, real)
        if self.perceptual is not None:
            terms["loss_g_vgg"] = self.perceptual(fake, real)
        return update_with(optim, "generator", terms, "loss_g")

    def upgrade_state_dict(self, state: dict) -> None:
        """0.3.0 kept the D-step count in a buffer `d_steps`, the DiffAugment as `d_augment` and
        the EMA generator as `generator_ema`."""
        if "d_steps" in state:
            d_steps = state.pop("d_steps")
            state["adversary.d_steps.count"] = d_steps
            if self.ema is not None:
                state["ema.updates.count"] = d_steps // self.d_steps_per_g_step
        rename_prefix(state, "d_augment.", "adversary.augment.")
        rename_prefix(state, "generator_ema.", "ema.generator.")

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

    def verdict(self, condition: torch.Tensor, fake: torch.Tensor, direction: str | None = None) -> torch.Tensor:
        """The discriminator on what it sees in training: the input and the output side by side."""
        return judged(self.discriminator, d_input_pair(condition, fake))

    def refresh_pass(self, given: torch.Tensor, draw: torch.Generator) -> None:
        if self.conditional:
            self.ema["generator"](to_signed(given))
        else:
            self.ema["generator"](torch.randn(len(given), self.latent_dim, 1, 1, generator=draw).to(given.device))

    def network_examples(self, height: int, width: int) -> dict[str, tuple[nn.Module, tuple]]:
        from framework.inference.segmentation import pad_to_multiple
        from framework.inference.settings import network_size_divisor

        generator = self.generator_for()
        (inputs,) = self.generator_inputs(1, height, width)
        if self.conditional:
            inputs = pad_to_multiple(inputs, network_size_divisor(generator))
        with torch.no_grad():
            fake = generator(inputs)
        seen = d_input_pair(inputs if self.conditional else None, fake)
        return {"generator": (generator, (inputs,)), "discriminator": (unwrap(self.discriminator), (seen,))}

    def evaluation_noise(self, indices: torch.Tensor) -> torch.Tensor:
        """Noise seeded by each sample's dataset index: the same fakes in every evaluation,
        whichever process or batch evaluates the sample."""
        return item_noise((self.latent_dim, 1, 1), 0, 0, indices.tolist()).to(indices.device)

    # ------------------------------------------------------------------ evaluation

    def val_step(self, batch: dict) -> dict:
        condition, real = self.unpack(batch)
        generator = self.generator_for()
        if self.conditional:
            fake = generator(condition)
            return {"fake": to_unit(fake), "real": to_unit(real), "input": to_unit(condition)}
        fake = generator(self.evaluation_noise(batch["index"]))
        return {"fake": to_unit(fake), "real": to_unit(real)}

    def visualize(self, batch: dict, outputs: dict, max_images: int) -> dict:
        """Conditional: a row per sample of input | output | target. Unconditional: the
        generator's images for the fixed noise, in a square grid."""
        if self.conditional:
            panels = side_by_side(outputs["input"], outputs["fake"], outputs["real"])
            return {"samples": stack_rows(panels, max_images)}
        samples = to_unit(self.generator_for()(self.fixed_noise))
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
