"""Semantic image synthesis (SPADE, Park et al., 2019; OASIS, Schönfeld et al., 2021): a label
map (+ noise) in, an image out, built on the GAN parts (framework/tasks/adversary.py, ema.py).

Batches are what the segmentation datasets give: "image" (uint8 RGB) and "mask" (class ids,
`ignore_index` for the don't-care label), so any segmentation layout (image + mask folders, VOC,
SPADE's label_dir/image_dir, SyntheticTextures) trains a synthesiser as it is. The generator
(SPADEGenerator) takes the one-hot label map (`one_hot_labels`: the don't-care label becomes its
own channel with `contain_dontcare_label`, as SPADE's) and OASIS's 3D noise (`noise_dim` of the
generator; 0: none, one label map gives one image).

The discriminator is chosen by the adversarial loss, by what the loss declares:
- a loss that does not read labels (hinge, as SPADE; lsgan, ...): D judges the label map and the
  image concatenated ([one-hot, image]; SPADE's multi-scale PatchGAN, with feature matching and a
  perceptual loss when configured);
- a loss that `reads_labels` (`gan_loss: oasis`, OASIS): D is a segmenter with num_classes + 1
  outputs judging the image alone; the loss is its class-balanced per-pixel CE (true classes on
  reals, the fake class on fakes, the true classes for the generator), and LabelMix
  (`labelmix_weight`) asks D to judge a real/fake mixture region by region.

With `mode_seeking_weight` (MSGAN, framework/losses/mode_seeking.py) every label map is drawn
twice, with two noises, in one generator pass of the doubled batch (G's batch statistics cover
both draws, and BatchNorm's running statistics move once per step); D and G's adversarial terms
see the first draws, the mode-seeking term pulls the two apart. A generator without noise refuses it.

One iteration: draw the fakes, D's terms and update, ADA's p, G's terms (on the same fakes, or on
new draws with `fresh_noise_for_g`) and update, the EMA (its BatchNorm statistics re-estimated
before use: framework/tasks/ema_batchnorm.py); with accumulation every D micro-batch first, then
every G micro-batch with its fake drawn again under the same random state, as GANTask.
`val_step` returns "fake" and "fake_alt" (two noise draws per label map, seeded by the sample's
index: the same images in every evaluation), "real" and "labels", which SegmenterScore, Diversity
and the image metrics read.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from framework.dist import unwrap
from framework.errors import ConfigError
from framework.inference.generator import to_signed, to_unit
from framework.inference.noise import item_noise
from framework.losses.mode_seeking import check_form, mode_seeking_loss, spread_ratios
from framework.losses.oasis import labelmix_consistency, labelmix_images, labelmix_mask
from framework.models.spade import one_hot_labels
from framework.registry import TASKS
from framework.tasks.adversary import Adversary, check_weight
from framework.tasks.base import GeneratorTask, average_logs, micro_step, update_with
from framework.tasks.ema import EMA
from framework.tasks.ema_batchnorm import BATCHES, EMABatchNorm, ReestimatedEMAState, check_batches
from framework.tasks.labels_to_image import LabelsToImage
from framework.tasks.parts import random_state, replaying
from framework.tasks.synthesis_options import (
    check_dont_care_class,
    check_labelmix_coin,
    check_networks,
    check_options,
)
from framework.visualization.palette import colorize, default_palette
from framework.visualization.panels import side_by_side, stack_rows, write_named_pngs


@TASKS.register()
class SemanticSynthesisTask(ReestimatedEMAState, GeneratorTask):
    """num_classes, ignore_index   the label maps' classes and don't-care value
    generator          SPADEGenerator (its num_classes, contain_dontcare_label and noise_dim decide
                       what it takes)
    discriminator      a PatchGAN on [one-hot, image] (a loss that does not read labels), or a
                       segmentation network with num_classes + 1 outputs (gan_loss: oasis)
    gan_loss, d_weight, adv_weight, r1_weight, r1_interval, d_augment, feature_matching   the adversary's
    perceptual         null or {type: VGGPerceptualLoss, ...}: the fake against the real image
    labelmix_weight    OASIS's LabelMix consistency weight (10); 0: none. Needs gan_loss: oasis
    labelmix_coin      image: each class region of each image real or fake by its own coin; batch: one coin
                       per class for the (micro-)batch, as OASIS draws it on each GPU's share
    mode_seeking_weight   MSGAN's mode-seeking term's weight (MSGAN's 1; the OASIS-style config 0.03); 0: none. Needs noise
    mode_seeking_form  per_sample (a ratio per map, bounded: framework/losses/mode_seeking.py) or batch (MSGAN's)
    fresh_noise_for_g  G's step draws its fakes anew, with new noise (OASIS, SPADE); false: it reuses D's fakes
    ema_decay, ema_start   the generator's moving average (null: none)
    ema_bn_batches     the EMA generator's BatchNorm statistics re-estimated on the last this many training
                       batches before it is evaluated, saved or exported (framework/tasks/ema_batchnorm.py); 0: the
                       live generator's
    instance_edges     SPADE's instance-edge channel after the one-hot map, from the batches' "edges"
                       (a dataset's `instance_edges: true`, Cityscapes); the generator's own flag too
    """

    required_optimizers = ("generator", "discriminator")
    conditioning = "labels"

    def __init__(self, generator: nn.Module, discriminator: nn.Module, num_classes: int, ignore_index: int = 255,
                 gan_loss="hinge", d_weight: float = 1.0, adv_weight: float = 1.0, r1_weight: float = 0.0,
                 r1_interval: int = 1, d_augment: nn.Module | None = None, feature_matching: nn.Module | None = None,
                 perceptual: nn.Module | None = None, labelmix_weight: float = 0.0, labelmix_coin: str = "image",
                 mode_seeking_weight: float = 0.0, mode_seeking_form: str = "per_sample",
                 fresh_noise_for_g: bool = False, ema_decay: float | None = None, ema_start: int = 0,
                 ema_bn_batches: int = BATCHES, palette=None, instance_edges: bool = False):
        super().__init__()
        self.generator, self.discriminator = generator, discriminator
        self.adversary = Adversary(gan_loss, d_weight, adv_weight, r1_weight=r1_weight, r1_interval=r1_interval,
                                   augment=d_augment, feature_matching=feature_matching, has_labels=True)
        self.num_classes, self.ignore_index = num_classes, ignore_index
        self.instance_edges = bool(instance_edges)
        check_networks(generator, discriminator, num_classes, self.adversary.loss.reads_labels, self.instance_edges)
        check_dont_care_class(self.adversary.loss, num_classes)
        self.labelmix_weight = check_weight("labelmix_weight", labelmix_weight)
        self.labelmix_coin = check_labelmix_coin(labelmix_coin)
        self.mode_seeking_weight = check_weight("mode_seeking_weight", mode_seeking_weight)
        self.mode_seeking_form = check_form(mode_seeking_form)
        check_options(generator, self.adversary.loss.reads_labels, self.labelmix_weight, self.mode_seeking_weight,
                      fresh_noise_for_g, self.instance_edges, ema_decay, ema_bn_batches)
        self.fresh_noise_for_g = fresh_noise_for_g
        self.perceptual = perceptual
        self.ema = EMA({"generator": generator}, ema_decay, ema_start) if ema_decay is not None else None
        self.ema_batchnorm = EMABatchNorm(None if self.ema is None else self.ema["generator"], check_batches(
            ema_bn_batches), (min(0, ignore_index), max(num_classes - 1, ignore_index)))
        colours = torch.tensor(palette, dtype=torch.uint8) if palette else torch.from_numpy(default_palette(num_classes))
        self.register_buffer("palette", colours, persistent=False)

    @property
    def noise_shape(self) -> tuple[int, ...] | None:
        noise_dim = unwrap(self.generator).noise_dim
        return (noise_dim,) if noise_dim else None

    @property
    def judges_pairs(self) -> bool:
        """D sees [one-hot, image] (a loss that does not read labels), else the image alone."""
        return not self.adversary.loss.reads_labels

    # ------------------------------------------------------------------ training

    def one_hot(self, labels: torch.Tensor) -> torch.Tensor:
        generator = unwrap(self.generator)
        return one_hot_labels(labels.long(), self.num_classes, self.ignore_index, generator.contain_dontcare_label)

    def label_input(self, batch: dict) -> torch.Tensor:
        """What the generator is conditioned on: the one-hot map, and the instance edges with `instance_edges`."""
        one_hot = self.one_hot(batch["mask"])
        if not self.instance_edges:
            return one_hot
        if "edges" not in batch:
            raise ConfigError("task.instance_edges: the batches carry no instance edges; set instance_edges: true "
                              "on the dataset too (Cityscapes with labels: synthesis)")
        return torch.cat([one_hot, batch["edges"][:, None].to(one_hot.dtype)], dim=1)

    def draw_noise(self, count: int, device: torch.device) -> torch.Tensor | None:
        return None if self.noise_shape is None else torch.randn(count, *self.noise_shape, device=device)

    def train_step(self, batch: dict, optim) -> dict:
        return self.train_iteration([batch], optim)

    def train_iteration(self, batches: list[dict], optim) -> dict:
        self.adversary.start_d_step()
        single = len(batches) == 1
        inputs = [(self.label_input(batch), batch["mask"].long(), to_signed(batch["image"])) for batch in batches]
        drawn, d_logs = [], []
        for index, (one_hot, labels, real) in enumerate(inputs):
            with micro_step(optim, index, len(batches)):
                noise, rng, fakes = self.draw_for_step(one_hot, real, single and not self.fresh_noise_for_g)
                drawn.append((noise, rng, fakes))
                d_logs.append(self.discriminator_step(one_hot, labels, real, fakes[0].detach(), optim))
        logs = {**average_logs(d_logs), **self.adversary.adapt()}
        if self.fresh_noise_for_g:  # every micro-batch's new draw before any G step, as D's (the floor reads them all)
            drawn = [self.draw_for_step(one_hot, real, single) for one_hot, _, real in inputs]
        floor, g_logs = self.mode_seeking_floor(drawn), []
        for index, ((one_hot, labels, real), (noise, rng, fakes)) in enumerate(zip(inputs, drawn)):
            with micro_step(optim, index, len(batches)):
                if not single:  # the same fakes again, now with a graph
                    with replaying(rng, unwrap(self.generator)):
                        fakes = self.draw(one_hot, noise)
                g_logs.append(self.generator_step(one_hot, labels, real, fakes, noise, optim, floor))
        if self.ema is not None:
            self.ema.update({"generator": self.generator})
            for batch in batches:
                self.ema_batchnorm.remember(batch["mask"])
        return {**logs, **average_logs(g_logs)}

    def training_noise(self, count: int, device: torch.device) -> torch.Tensor | None:
        """count draws; with mode seeking 2 x count (the first draws, then the second), drawn map by
        map: a micro-batch's noise is its part of the whole batch's random stream."""
        if not self.mode_seeking_weight:
            return self.draw_noise(count, device)
        return self.draw_noise(count * 2, device).view(count, 2, -1).transpose(0, 1).reshape(count * 2, -1)

    def draw_for_step(self, one_hot, real, with_graph: bool) -> tuple:
        """(noise, the random state it was drawn from or None, fakes): with a graph when the step
        that uses them is the next (one micro-batch), else under no_grad, to be replayed."""
        noise = self.training_noise(real.shape[0], real.device)
        rng = None if with_graph else random_state(real.device)
        with contextlib.nullcontext() if with_graph else torch.no_grad():
            return noise, rng, self.draw(one_hot, noise)

    def mode_seeking_floor(self, drawn: list[tuple]) -> torch.Tensor | None:
        """The per-sample term's bound: the mean spread ratio over every micro-batch's draws (what
        one whole batch gives), detached; None for the batch form or without the term."""
        if not self.mode_seeking_weight or self.mode_seeking_form != "per_sample":
            return None
        with torch.no_grad():
            return torch.cat([spread_ratios(*(fake.detach() for fake in fakes), *noise.chunk(2))
                              for noise, _, fakes in drawn]).mean()

    def draw(self, one_hot, noise) -> tuple[torch.Tensor, ...]:
        """(fake,), or with mode seeking (fake, second draw) from one pass of the doubled batch."""
        if not self.mode_seeking_weight:
            return (self.generator(one_hot, noise),)
        return self.generator(torch.cat([one_hot, one_hot]), noise).chunk(2)

    def discriminator_step(self, one_hot, labels, real, fake, optim) -> dict:
        condition = one_hot if self.judges_pairs else None

        def labelmix(real_output, fake_output) -> dict:
            """OASIS's LabelMix: D on a region-by-region mixture of the real and the fake image must
            give the same mixture of its outputs on each (D's outputs reused, one more pass)."""
            mask = labelmix_mask(labels, self.num_classes, self.ignore_index, per_image=self.labelmix_coin == "image")
            mixed_output = self.discriminator(labelmix_images(mask, real, fake))
            return {"loss_d_labelmix": labelmix_consistency(mixed_output, real_output, fake_output, mask, labels,
                                                            self.ignore_index, self.labelmix_weight)}

        loss, logs = self.adversary.d_loss(self.discriminator, real, fake, condition, details=optim.log_details,
                                           labels=labels, regularizer=labelmix if self.labelmix_weight else None)
        optim.update(loss, "discriminator")
        return logs

    def generator_step(self, one_hot, labels, real, fakes, noise, optim, floor=None) -> dict:
        condition = one_hot if self.judges_pairs else None
        adversarial, matching = self.adversary.g_loss(self.discriminator, fakes[0], condition, real, labels=labels)
        terms = {"loss_g_adv": adversarial}
        if matching is not None:
            terms["loss_g_fm"] = matching
        if self.perceptual is not None:
            terms["loss_g_vgg"] = self.perceptual(fakes[0], real)
        if self.mode_seeking_weight:
            terms["loss_g_ms"] = self.mode_seeking_weight * mode_seeking_loss(*fakes, *noise.chunk(2),
                                                                              form=self.mode_seeking_form, floor=floor)
        return update_with(optim, "generator", terms, "loss_g")

    # ------------------------------------------------------------------ the GeneratorTask interface

    def refresh_pass(self, labels: torch.Tensor, draw: torch.Generator) -> None:
        noise = None if self.noise_shape is None else torch.randn(labels.shape[0], *self.noise_shape, generator=draw)
        self.ema["generator"](self.one_hot(labels.long()), None if noise is None else noise.to(labels.device))

    def generator_inputs(self, batch: int, height: int, width: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
        """(one-hot map of random classes, noise or nothing)."""
        draw = torch.Generator().manual_seed(seed)
        labels = torch.randint(0, self.num_classes, (batch, height, width), generator=draw)
        noise = None if self.noise_shape is None else torch.randn(batch, *self.noise_shape, generator=draw)
        condition = self.one_hot(labels)
        if self.instance_edges:  # an example input: no instance boundaries
            condition = torch.cat([condition, torch.zeros_like(condition[:, :1])], dim=1)
        return (condition,) if noise is None else (condition, noise)

    def network_examples(self, height: int, width: int) -> dict[str, tuple[nn.Module, tuple]]:
        generator, inputs = self.generator_for(), self.generator_inputs(1, height, width)
        with torch.no_grad():
            fake = generator(*inputs)
        seen = torch.cat([inputs[0], fake], dim=1) if self.judges_pairs else fake
        return {"generator": (generator, inputs), "discriminator": (unwrap(self.discriminator), (seen,))}

    def deployable(self, direction: str | None = None):
        generator = self.generator_for(direction)
        if self.instance_edges:
            raise ConfigError("task.instance_edges: this generator also takes instance edges, and tools/infer.py and "
                              "export give it label maps alone; not supported yet")
        return LabelsToImage(generator, self.num_classes, self.ignore_index).eval(), "labels", self.num_classes

    def evaluation_noise(self, indices: torch.Tensor, draw: int = 0) -> torch.Tensor | None:
        """Draw `draw`'s noise of each sample, seeded by its dataset index: the same fakes in every evaluation."""
        if self.noise_shape is None:
            return None
        return item_noise(self.noise_shape, 0, draw, indices.tolist()).to(indices.device)

    # ------------------------------------------------------------------ evaluation

    def val_step(self, batch: dict) -> dict:
        labels, generator = batch["mask"].long(), self.generator_for()
        one_hot = self.label_input(batch)
        fake = generator(one_hot, self.evaluation_noise(batch["index"]))
        fake_alt = generator(one_hot, self.evaluation_noise(batch["index"], draw=1))
        return {"fake": to_unit(fake), "fake_alt": to_unit(fake_alt), "real": to_unit(to_signed(batch["image"])),
                "labels": labels}

    def panels(self, outputs: dict) -> torch.Tensor:
        """A row per sample: label map | fake | a second draw | real image."""
        labels = colorize(outputs["labels"], self.palette, self.ignore_index).float() / 255
        return side_by_side(labels, outputs["fake"], outputs["fake_alt"], outputs["real"])

    def visualize(self, batch: dict, outputs: dict, max_images: int) -> dict:
        return {"samples": stack_rows(self.panels(outputs), max_images)}

    def save_visuals(self, batch: dict, outputs: dict, folder) -> None:
        write_named_pngs(folder, batch["name"], self.panels(outputs))

