"""CycleGAN (Zhu et al., 2017): unpaired translation between image domains A and B.

Four networks under two named optimizers: `generators` (generator_ab: A -> B, generator_ba:
B -> A) and `discriminators` (discriminator_a judges A images, discriminator_b judges B).
Batches hold uint8 images "a" and "b" (framework/data/unpaired.py), mapped to [-1, 1] here.

One iteration (as the original's optimize_parameters):

    G step, discriminators frozen (they collect no gradients):
        fake_b = G_ab(a), rec_a = G_ba(fake_b), fake_a = G_ba(b), rec_b = G_ab(fake_a)
        loss_g_ab   = adv_weight x GAN(D_b(T_b(fake_b)) is real)     loss_g_ba = ... D_a(T_a(fake_a))
        loss_cycle_a = cycle_weight x |rec_a - a|_1               loss_cycle_b = ... |rec_b - b|_1
        loss_idt_a  = cycle_weight x identity_weight x |G_ba(a) - a|_1     (identity_weight > 0)
        loss_idt_b  = cycle_weight x identity_weight x |G_ab(b) - b|_1
        optim.update(sum, "generators")
    D step, on real images and on the fakes of the G step (detached, drawn before G's update,
    as in the original) passed through each direction's image pool:
        loss_d_a = d_weight x GAN(D_a(T_a(a)) is real) + d_weight x GAN(D_a(T_a(pool_a(fake_a))) is fake)
                   (+ loss_d_r1_a on every r1_interval-th iteration), loss_d_b alike
        optim.update(loss_d_a + loss_d_b, "discriminators")
    then each adaptive DiffAugment reads its D's verdicts on the reals (ADA), and the EMA
    generators follow (ema_decay set).

T_a, T_b: DiffAugment (`d_augment`), the identity without it; every call draws its own
transform (reals and fakes are augmented apart, as in DiffAugment's own training loop), and
the generator's term is differentiated through it. One DiffAugment per domain, both built
from the config's node: StyleGAN2-ADA adapts one p per discriminator, to how that D overfits
its own reals, so D_a's p does not move with D_b's verdicts (logged as ada_p_a, ada_p_b;
checkpointed as buffers of `adversary_a.augment`, `adversary_b.augment`).

R1 (`r1_weight`, `r1_interval`): lazy, as in GANTask: on every r1_interval-th D step (one per
iteration, counted by each adversary, which the checkpoint holds), each D's pass on its (augmented) reals runs in
float32 and the penalty r1_weight / 2 x r1_interval x E||grad_real D||^2 joins that D's loss,
tied to its logits so DDP sees every parameter. The discriminators may be multi-scale
(MultiScaleDiscriminator): the losses, R1 and the logged logits average over the scales.

With gradient accumulation (train.accumulate N) the order is: every micro-batch's G terms and
the G step, then every micro-batch's D terms (each micro-batch's fakes through the pools in
order) and the D step; this equals one batch N times as large, the pools included.

The image pools (framework/tasks/image_pool.py) are per process: under DDP each rank keeps its
own fakes, its generator seeded from the run's seed and the rank. They are saved in the
checkpoint through `rank_state_dict` (every rank's) and restored per rank on resume.

Each discriminator has its adversary (framework/tasks/adversary.py: `adversary_a` for D_a,
`adversary_b` for D_b), which holds its loss, DiffAugment, lazy R1, feature matching (needs a
discriminator with features: `feature_matching: {type: FeatureMatchingLoss}` compares D_b's
features on G_ab(a) and on b), diagnostics and health check; one EMA part (framework/tasks/
ema.py) follows both generators. `perceptual` adds a perceptual term to each cycle
reconstruction (rec_a against a, rec_b against b), the only pair CycleGAN has.

Evaluation (`val_step`) translates both ways with the (EMA) generators and returns the panels'
images; when the evaluation samples pair by name (testA/x.png with testB/x.png) it also returns
`fake_ab`/`real_ab` and `fake_ba`/`real_ba`, which the image metrics read with `suffix: _ab` /
`_ba` (PSNR_ab, SSIM_ba, ...).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from framework.dist import unwrap
from framework.inference.generator import to_signed, to_unit
from framework.registry import TASKS
from framework.tasks.adversary import Adversary, check_weight
from framework.tasks.base import GeneratorTask, average_logs, micro_step, rename_prefix, update_with
from framework.tasks.derived import judged
from framework.tasks.ema import EMA
from framework.tasks.ema_batchnorm import batch_norms
from framework.tasks.image_pool import ImagePool
from framework.visualization.panels import side_by_side, stack_rows, write_named_pngs

DIRECTIONS = ("AtoB", "BtoA")


@TASKS.register()
class CycleGANTask(GeneratorTask):
    """Unpaired image-to-image translation with two generators and two discriminators.

    gan_loss          lsgan (the original's) | vanilla | hinge | wgan-gp, or an AdversarialLoss node
    adv_weight        weight of each generator's adversarial loss
    cycle_weight      weight of each cycle-consistency L1 loss (the original's lambda_A/B, 10)
    identity_weight   identity loss weight relative to cycle_weight (the original's lambda_identity,
                      0.5: the identity terms are weighted 0.5 x 10 = 5); 0: no identity terms
    d_weight          weight of each discriminator's real and fake terms (0.5, as the original)
    gp_weight         weight of the gradient penalty (a loss that needs one: wgan-gp)
    pool_size         fakes kept per direction for the discriminators (50); 0: no pool
    r1_weight         R1 penalty gamma on each discriminator's reals (0: none)
    r1_interval       apply R1 every k-th D step, multiplied by k (lazy regularisation)
    d_augment         null or {type: DiffAugment, ...}: what each D sees augmented, one p per D
    feature_matching  null or {type: FeatureMatchingLoss, weight: 10}: each generator matches its
                      judge's features on its fakes to those on that domain's reals
    perceptual        null or {type: VGGPerceptualLoss, ...}: on each cycle reconstruction
    ema_decay         keep EMA copies of both generators for evaluation and inference; null: none (refused
                      for generators with BatchNorm, whose statistics would not fit the averaged weights)
    ema_start         generator updates during which the EMAs just copy the generators
    """

    required_optimizers = ("generators", "discriminators")
    directions = DIRECTIONS
    conditioning = "unpaired"

    def __init__(self, generator_ab: nn.Module, generator_ba: nn.Module, discriminator_a: nn.Module,
                 discriminator_b: nn.Module, gan_loss="lsgan", adv_weight: float = 1.0,
                 cycle_weight: float = 10.0, identity_weight: float = 0.5, d_weight: float = 0.5,
                 gp_weight: float = 10.0, pool_size: int = 50, ema_decay: float | None = None, ema_start: int = 0,
                 r1_weight: float = 0.0, r1_interval: int = 1, d_augment: nn.Module | None = None,
                 feature_matching: nn.Module | None = None, perceptual: nn.Module | None = None):
        super().__init__()
        self.generator_ab, self.generator_ba = generator_ab, generator_ba
        self.discriminator_a, self.discriminator_b = discriminator_a, discriminator_b
        self.cycle_weight = check_weight("cycle_weight", cycle_weight)
        self.identity_weight = check_weight("identity_weight", identity_weight)
        # One adversary per discriminator, each with its own DiffAugment (module docstring).
        settings = dict(gan_loss=gan_loss, d_weight=d_weight, adv_weight=adv_weight, gp_weight=gp_weight,
                        r1_weight=r1_weight, r1_interval=r1_interval, feature_matching=feature_matching)
        self.adversary_a = Adversary(**settings, augment=d_augment, suffix="_a")
        self.adversary_b = Adversary(**settings, augment=copy.deepcopy(d_augment), suffix="_b")
        self.perceptual = perceptual
        self.ema = None
        if ema_decay is not None:
            if batch_norms(generator_ab) or batch_norms(generator_ba):  # GANTask re-estimates them; not done here
                raise ValueError("ema_decay: the generators have BatchNorm, whose running statistics the EMA copies "
                                 "from the live generators instead of estimating them for the averaged weights; "
                                 "use instance norm (norm: in, CycleGAN's) or ema_decay: null")
            self.ema = EMA({"generator_ab": generator_ab, "generator_ba": generator_ba}, ema_decay, ema_start)
        # Seeded from the run's seed and the rank (the engine seeds torch with seed + rank
        # before building the task), one stream per pool.
        base = torch.initial_seed()
        self.pool_a = ImagePool(pool_size, (4 * base + 1) % 2**63)
        self.pool_b = ImagePool(pool_size, (4 * base + 2) % 2**63)

    # ------------------------------------------------------------------ training

    def train_step(self, batch: dict, optim) -> dict:
        """One whole iteration on one batch (a GAN's iteration is not a sum over micro-batches)."""
        return self.train_iteration([batch], optim)

    def train_iteration(self, batches: list[dict], optim) -> dict:
        """All G micro-batches and the G step, then all D micro-batches and the D step."""
        images = [(to_signed(batch["a"]), to_signed(batch["b"])) for batch in batches]
        g_logs, fakes = [], []
        for index, (a, b) in enumerate(images):
            with micro_step(optim, index, len(batches)):
                logs, fake_a, fake_b = self.generator_step(a, b, optim)
            g_logs.append(logs)
            fakes.append((fake_a, fake_b))
        self.adversary_a.start_d_step()
        self.adversary_b.start_d_step()
        d_logs = []
        for index, ((a, b), (fake_a, fake_b)) in enumerate(zip(images, fakes)):
            with micro_step(optim, index, len(batches)):
                loss_a, logs_a = self.adversary_a.d_loss(self.discriminator_a, a, self.pool_a.query(fake_a),
                                                         details=optim.log_details)
                loss_b, logs_b = self.adversary_b.d_loss(self.discriminator_b, b, self.pool_b.query(fake_b),
                                                         details=optim.log_details)
                optim.update(loss_a + loss_b, "discriminators")
            d_logs.append({**logs_a, **logs_b})
        ada_logs = {**self.adversary_a.adapt(), **self.adversary_b.adapt()}
        if self.ema is not None:
            self.ema.update({"generator_ab": self.generator_ab, "generator_ba": self.generator_ba})
        return {**average_logs(g_logs), **average_logs(d_logs), **ada_logs}

    def generator_step(self, a: torch.Tensor, b: torch.Tensor, optim):
        """The G update's terms on one (micro-)batch -> (logs, fake_a, fake_b detached)."""
        fake_b = self.generator_ab(a)
        rec_a = self.generator_ba(fake_b)
        fake_a = self.generator_ba(b)
        rec_b = self.generator_ab(fake_a)
        terms = {}
        terms["loss_g_ab"], matching_ab = self.adversary_b.g_loss(self.discriminator_b, fake_b, real=b)
        terms["loss_g_ba"], matching_ba = self.adversary_a.g_loss(self.discriminator_a, fake_a, real=a)
        if matching_ab is not None:
            terms["loss_g_fm_ab"], terms["loss_g_fm_ba"] = matching_ab, matching_ba
        terms["loss_cycle_a"] = self.cycle_weight * F.l1_loss(rec_a, a)
        terms["loss_cycle_b"] = self.cycle_weight * F.l1_loss(rec_b, b)
        if self.perceptual is not None:
            terms["loss_vgg_a"], terms["loss_vgg_b"] = self.perceptual(rec_a, a), self.perceptual(rec_b, b)
        if self.identity_weight:
            weight = self.cycle_weight * self.identity_weight
            terms["loss_idt_a"] = weight * F.l1_loss(self.generator_ba(a), a)
            terms["loss_idt_b"] = weight * F.l1_loss(self.generator_ab(b), b)
        return update_with(optim, "generators", terms, "loss_g"), fake_a.detach(), fake_b.detach()

    # ------------------------------------------------------------------ state

    def rank_state_dict(self) -> dict:
        return {"pool_a": self.pool_a.state_dict(), "pool_b": self.pool_b.state_dict()}

    def load_rank_state_dict(self, state: dict) -> None:
        device = next(self.parameters()).device
        self.pool_a.load_state_dict(state["pool_a"], device)
        self.pool_b.load_state_dict(state["pool_b"], device)

    def upgrade_state_dict(self, state: dict) -> None:
        """0.3.0 counted iterations in the task's own extra state and kept `d_augment_a`,
        `d_augment_b`, `generator_ab_ema`, `generator_ba_ema` as the task's children."""
        old = state.get("_extra_state")
        if isinstance(old, dict) and "iterations" in old:
            iterations = torch.tensor(int(state.pop("_extra_state")["iterations"]))
            for key in ("adversary_a.d_steps.count", "adversary_b.d_steps.count"):
                state[key] = iterations.clone()
            if self.ema is not None:
                state["ema.updates.count"] = iterations.clone()
        for domain in ("a", "b"):
            rename_prefix(state, f"d_augment_{domain}.", f"adversary_{domain}.augment.")
        for direction in ("ab", "ba"):
            rename_prefix(state, f"generator_{direction}_ema.", f"ema.generator_{direction}.")

    # ------------------------------------------------------------------ evaluation and inference

    def generator_for(self, direction: str | None = "AtoB") -> nn.Module:
        """The generator of `direction` (AtoB or BtoA) used for evaluation: its EMA when kept."""
        name = "generator_ab" if self.check_direction(direction) == "AtoB" else "generator_ba"
        return self.ema[name] if self.ema is not None else unwrap(getattr(self, name))

    def verdict(self, condition: torch.Tensor, fake: torch.Tensor, direction: str | None = "AtoB") -> torch.Tensor:
        """The target domain's discriminator on the translation alone: D_b judges AtoB, D_a BtoA."""
        return judged(self.discriminator_b if direction == "AtoB" else self.discriminator_a, fake)

    def network_examples(self, height: int, width: int) -> dict[str, tuple[nn.Module, tuple]]:
        examples = {}
        for direction, judge in (("AtoB", "discriminator_b"), ("BtoA", "discriminator_a")):
            generator = self.generator_for(direction)
            inputs = self.generator_inputs(1, height, width)
            with torch.no_grad():
                fake = generator(*inputs)
            examples[f"generator_{direction}"] = (generator, inputs)
            examples[judge] = (unwrap(getattr(self, judge)), (fake,))
        return examples

    def val_step(self, batch: dict) -> dict:
        a, b = to_signed(batch["a"]), to_signed(batch["b"])
        g_ab, g_ba = self.generator_for("AtoB"), self.generator_for("BtoA")
        fake_b, fake_a = g_ab(a), g_ba(b)
        rec_a, rec_b = g_ba(fake_b), g_ab(fake_a)
        outputs = {name: to_unit(image) for name, image in
                   (("a", a), ("fake_b", fake_b), ("rec_a", rec_a), ("b", b), ("fake_a", fake_a), ("rec_b", rec_b))}
        if list(batch["name_a"]) == list(batch["name_b"]):  # paired by name: G_ab(a) should be b
            outputs.update(fake_ab=outputs["fake_b"], real_ab=outputs["b"],
                           fake_ba=outputs["fake_a"], real_ba=outputs["a"])
        return outputs

    @staticmethod
    def panels(outputs: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows A | G_ab(A) | G_ba(G_ab(A)) and B | G_ba(B) | G_ab(G_ba(B))."""
        return (side_by_side(outputs["a"], outputs["fake_b"], outputs["rec_a"]),
                side_by_side(outputs["b"], outputs["fake_a"], outputs["rec_b"]))

    def visualize(self, batch: dict, outputs: dict, max_images: int) -> dict:
        rows_a, rows_b = self.panels(outputs)
        return {"samples_a": stack_rows(rows_a, max_images), "samples_b": stack_rows(rows_b, max_images)}

    def save_visuals(self, batch: dict, outputs: dict, folder) -> None:
        """<name>_AtoB.png and <name>_BtoA.png: the rows of `panels`."""
        rows_a, rows_b = self.panels(outputs)
        write_named_pngs(folder, [f"{name}_AtoB" for name in batch["name_a"]], rows_a)
        write_named_pngs(folder, [f"{name}_BtoA" for name in batch["name_b"]], rows_b)
