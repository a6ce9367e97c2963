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
        loss_d_a = d_weight x (GAN(D_a(T_a(a)) is real) + GAN(D_a(T_a(pool_a(fake_a))) is fake))
                   (+ loss_d_r1_a on every r1_interval-th iteration), loss_d_b alike
        optim.update(loss_d_a + loss_d_b, "discriminators")
    then each adaptive DiffAugment reads its D's verdicts on the reals (ADA), and the EMA
    generators follow (ema_decay set).

T_a, T_b: DiffAugment (`d_augment`), the identity without it; every call draws its own
transform (reals and fakes are augmented apart, as in DiffAugment's own training loop), and
the generator's term is differentiated through it. One DiffAugment per domain, both built
from the config's node: StyleGAN2-ADA adapts one p per discriminator, to how that D overfits
its own reals, so D_a's p does not move with D_b's verdicts (logged as ada_p_a, ada_p_b;
checkpointed as buffers of `d_augment_a`, `d_augment_b`).

R1 (`r1_weight`, `r1_interval`): lazy, with `LazyR1` as in GANTask (framework/tasks/
discriminator_step.py): on every r1_interval-th D step (one per iteration, counted by
`iterations`, which the checkpoint holds), each D's pass on its (augmented) reals runs in
float32 and the penalty r1_weight / 2 x r1_interval x E||grad_real D||^2 joins that D's loss,
tied to its logits so DDP sees every parameter. The discriminators may be multi-scale
(MultiScaleDiscriminator): the losses, R1 and the logged logits average over the scales.

With gradient accumulation (train.accumulate N) the order is: every micro-batch's G terms and
the G step, then every micro-batch's D terms (each micro-batch's fakes through the pools in
order) and the D step; this equals one batch N times as large, the pools included.

The image pools (framework/tasks/image_pool.py) are per process: under DDP each rank keeps its
own fakes, its generator seeded from the run's seed and the rank. They are saved in the
checkpoint through `rank_state_dict` (every rank's) and restored per rank on resume.

The adversarial terms go through two methods, `judge` (a discriminator on an image) and
`adversarial_loss` (the generator's loss on a discriminator's verdict), the one place to plug
other discriminator outputs or losses into.

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

from framework.inference.generator import to_signed, to_unit
from framework.losses.gan import GANLoss, sample_verdicts
from framework.registry import TASKS
from framework.tasks.base import Task, average_logs, frozen, total_loss, unwrap
from framework.tasks.discriminator_step import LazyR1, d_diagnostics, d_input_pair
from framework.tasks.ema import update_ema
from framework.tasks.gan_health import GANHealth
from framework.tasks.image_pool import ImagePool
from framework.visualization.panels import side_by_side, stack_rows, write_named_pngs

DIRECTIONS = ("AtoB", "BtoA")


@TASKS.register()
class CycleGANTask(Task):
    """Unpaired image-to-image translation with two generators and two discriminators.

    gan_loss          lsgan (the original's) | vanilla | hinge
    adv_weight        weight of each generator's adversarial loss
    cycle_weight      weight of each cycle-consistency L1 loss (the original's lambda_A/B, 10)
    identity_weight   identity loss weight relative to cycle_weight (the original's lambda_identity,
                      0.5: the identity terms are weighted 0.5 x 10 = 5); 0: no identity terms
    d_weight          weight of each discriminator's real + fake terms (0.5, as the original)
    pool_size         fakes kept per direction for the discriminators (50); 0: no pool
    r1_weight         R1 penalty gamma on each discriminator's reals (0: none)
    r1_interval       apply R1 every k-th D step, multiplied by k (lazy regularisation)
    d_augment         null or {type: DiffAugment, ...}: what each D sees augmented, one p per D
    ema_decay         keep EMA copies of both generators for evaluation and inference; null: none
    ema_start         generator updates during which the EMAs just copy the generators
    """

    required_optimizers = ("generators", "discriminators")
    directions = DIRECTIONS
    conditional = True  # image in, image out (what the inference tools ask)

    def __init__(self, generator_ab: nn.Module, generator_ba: nn.Module, discriminator_a: nn.Module,
                 discriminator_b: nn.Module, gan_loss: str = "lsgan", adv_weight: float = 1.0,
                 cycle_weight: float = 10.0, identity_weight: float = 0.5, d_weight: float = 0.5,
                 pool_size: int = 50, ema_decay: float | None = None, ema_start: int = 0,
                 r1_weight: float = 0.0, r1_interval: int = 1, d_augment: nn.Module | None = None):
        super().__init__()
        self.generator_ab, self.generator_ba = generator_ab, generator_ba
        self.discriminator_a, self.discriminator_b = discriminator_a, discriminator_b
        self.gan_loss = GANLoss(gan_loss)
        if self.gan_loss.needs_gradient_penalty:
            raise ValueError("gan_loss: wgan-gp needs a gradient penalty, which CycleGANTask does not add; "
                             "use lsgan, vanilla or hinge")
        if min(adv_weight, cycle_weight, identity_weight, d_weight) < 0:
            raise ValueError("adv_weight, cycle_weight, identity_weight and d_weight must be >= 0")
        if ema_decay is not None and not 0.0 <= ema_decay < 1.0:
            raise ValueError(f"ema_decay must be in [0, 1) or null, got {ema_decay}")
        self.adv_weight, self.cycle_weight = adv_weight, cycle_weight
        self.identity_weight, self.d_weight = identity_weight, d_weight
        self.ema_decay, self.ema_start = ema_decay, ema_start
        self.r1 = LazyR1(r1_weight, r1_interval)
        # One DiffAugment per discriminator (module docstring): its own p, sums and counter.
        self.d_augment_a, self.d_augment_b = d_augment, copy.deepcopy(d_augment)
        if ema_decay is not None:  # submodules without trainable parameters: checkpointed, in no optimizer
            self.generator_ab_ema = copy.deepcopy(generator_ab).requires_grad_(False)
            self.generator_ba_ema = copy.deepcopy(generator_ba).requires_grad_(False)
        # Seeded from the run's seed and the rank (the engine seeds torch with seed + rank
        # before building the task), one stream per pool.
        base = torch.initial_seed()
        self.pool_a = ImagePool(pool_size, (4 * base + 1) % 2**63)
        self.pool_b = ImagePool(pool_size, (4 * base + 2) % 2**63)
        self.iterations = 0  # generator updates, for ema_start (checkpointed as extra state)
        self.health = [GANHealth(suffix="_a"), GANHealth(suffix="_b")]
        self.direction = "AtoB"  # which generator `eval_generator` is (tools/infer.py --direction)

    @property
    def uses_double_backward(self) -> bool:
        """R1 differentiates D's input gradient (which SyncBatchNorm cannot)."""
        return self.r1.enabled

    # ------------------------------------------------------------------ adversarial terms

    def judge(self, discriminator: nn.Module, image: torch.Tensor):
        """A discriminator's verdict on an image as it sees it (augmented already): logits, or
        a multi-scale output."""
        return discriminator(image)

    def adversarial_loss(self, discriminator: nn.Module, fake: torch.Tensor) -> torch.Tensor:
        """A generator's adversarial loss: the (frozen) discriminator should call `fake` (as
        it sees it, augmented already) real."""
        return self.gan_loss.generator(self.judge(discriminator, fake))

    def seen_by(self, domain: str, image: torch.Tensor) -> torch.Tensor:
        """`image` as discriminator `domain` ("a" or "b") sees it: through that domain's
        DiffAugment (a new draw per call), or as is."""
        return d_input_pair(None, image, getattr(self, f"d_augment_{domain}"))

    # ------------------------------------------------------------------ training

    def train_step(self, batch: dict, optim) -> dict:
        """One whole iteration on one batch (a GAN's iteration is not a sum over micro-batches)."""
        return self.train_iteration([batch], optim)

    def train_iteration(self, batches: list[dict], optim) -> dict:
        """All G micro-batches and the G step, then all D micro-batches and the D step."""
        images = [(to_signed(batch["a"]), to_signed(batch["b"])) for batch in batches]
        r1_due = self.r1.due(self.iterations + 1)  # one D step per iteration
        g_logs, fakes = [], []
        for index, (a, b) in enumerate(images):
            with optim.micro_step(index, len(batches)):
                logs, fake_a, fake_b = self.generator_step(a, b, optim)
            g_logs.append(logs)
            fakes.append((fake_a, fake_b))
        d_logs, verdicts = [], []
        for index, ((a, b), (fake_a, fake_b)) in enumerate(zip(images, fakes)):
            with optim.micro_step(index, len(batches)):
                logs, real_verdicts = self.discriminator_step(a, b, fake_a, fake_b, optim, r1_due)
            d_logs.append(logs)
            verdicts.append(real_verdicts)
        ada_logs = self.adapt_augments(verdicts)
        self.iterations += 1
        if self.ema_decay is not None:
            copy_only = self.iterations <= self.ema_start
            update_ema(self.generator_ab_ema, unwrap(self.generator_ab), self.ema_decay, copy_only)
            update_ema(self.generator_ba_ema, unwrap(self.generator_ba), self.ema_decay, copy_only)
        return {**average_logs(g_logs), **average_logs(d_logs), **ada_logs}

    def generator_step(self, a: torch.Tensor, b: torch.Tensor, optim):
        """The G update's terms on one (micro-)batch -> (logs, fake_a, fake_b detached)."""
        fake_b = self.generator_ab(a)
        rec_a = self.generator_ba(fake_b)
        fake_a = self.generator_ba(b)
        rec_b = self.generator_ab(fake_a)
        with frozen(self.discriminator_a) as d_a, frozen(self.discriminator_b) as d_b:
            terms = {"loss_g_ab": self.adv_weight * self.adversarial_loss(d_b, self.seen_by("b", fake_b)),
                     "loss_g_ba": self.adv_weight * self.adversarial_loss(d_a, self.seen_by("a", fake_a))}
        terms["loss_cycle_a"] = self.cycle_weight * F.l1_loss(rec_a, a)
        terms["loss_cycle_b"] = self.cycle_weight * F.l1_loss(rec_b, b)
        if self.identity_weight:
            weight = self.cycle_weight * self.identity_weight
            terms["loss_idt_a"] = weight * F.l1_loss(self.generator_ba(a), a)
            terms["loss_idt_b"] = weight * F.l1_loss(self.generator_ab(b), b)
        loss = total_loss(terms)
        optim.update(loss, "generators")
        return {"loss_g": loss.detach(), **{k: v.detach() for k, v in terms.items()}}, fake_a.detach(), fake_b.detach()

    def discriminator_step(self, a, b, fake_a, fake_b, optim, r1_due: bool = False) -> tuple[dict, dict]:
        """The D update on one (micro-)batch -> (logs, {domain: D's per-sample verdicts on its
        reals} for the adaptive DiffAugments; empty without d_augment)."""
        logs, losses, verdicts = {}, [], {}
        details = getattr(optim, "log_details", True)  # logged iterations only: a few reductions
        for domain, real, fake in (("a", a, fake_a), ("b", b, fake_b)):
            loss, domain_logs, real_output = self.discriminator_loss(domain, real, fake, r1_due, details)
            losses.append(loss)
            logs.update(domain_logs)
            if getattr(self, f"d_augment_{domain}") is not None:
                verdicts[domain] = sample_verdicts(real_output).detach()
        optim.update(losses[0] + losses[1], "discriminators")
        return logs, verdicts

    def discriminator_loss(self, domain: str, real, fake, r1_due: bool, details: bool):
        """One discriminator's loss on its reals and its pool's answer to `fake` -> (loss, logs,
        its output on the reals)."""
        discriminator, pool = getattr(self, f"discriminator_{domain}"), getattr(self, f"pool_{domain}")

        def critic(image):
            return self.judge(discriminator, self.seen_by(domain, image))

        if r1_due:  # D's pass on the reals in float32, its input gradient kept
            real_output, penalty = self.r1.real_pass(critic, real)
        else:
            real_output, penalty = critic(real), None
        fake_output = critic(pool.query(fake))
        loss_real, loss_fake = self.gan_loss.discriminator(real_output, fake_output)
        loss = self.d_weight * (loss_real + loss_fake)
        logs = {}
        if penalty is not None:
            loss = loss + penalty
            logs[f"loss_d_r1_{domain}"] = penalty.detach()
        logs[f"loss_d_{domain}"] = loss.detach()
        if details:
            logs.update(d_diagnostics(real_output, fake_output, fake, suffix=f"_{domain}"))
        return loss, logs, real_output

    def adapt_augments(self, verdicts: list[dict]) -> dict:
        """ADA, once per D step: each domain's DiffAugment reads its D's verdicts on the reals
        of every micro-batch (so accumulation counts as one step of the whole batch); each p
        is logged."""
        logs = {}
        for domain in ("a", "b"):
            augment = getattr(self, f"d_augment_{domain}")
            if augment is not None:
                augment.observe(torch.cat([step[domain] for step in verdicts]))
                logs[f"ada_p_{domain}"] = augment.p.detach().clone()
        return logs

    def diagnose(self, logged: dict[str, float]) -> list[str]:
        return [warning for health in self.health for warning in health.check(logged)]

    # ------------------------------------------------------------------ state

    def rank_state_dict(self) -> dict:
        return {"pool_a": self.pool_a.state_dict(), "pool_b": self.pool_b.state_dict()}

    def load_rank_state_dict(self, state: dict) -> None:
        device = next(self.parameters()).device
        self.pool_a.load_state_dict(state["pool_a"], device)
        self.pool_b.load_state_dict(state["pool_b"], device)

    def get_extra_state(self) -> dict:
        return {"iterations": self.iterations}

    def set_extra_state(self, state: dict) -> None:
        self.iterations = int(state["iterations"])

    # ------------------------------------------------------------------ evaluation and inference

    def generator_for(self, direction: str) -> nn.Module:
        """The generator of `direction` (AtoB or BtoA) used for evaluation: its EMA when kept."""
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be AtoB or BtoA, got {direction!r}")
        suffix = "ab" if direction == "AtoB" else "ba"
        if self.ema_decay is not None:
            return getattr(self, f"generator_{suffix}_ema")
        return unwrap(getattr(self, f"generator_{suffix}"))

    @property
    def eval_generator(self) -> nn.Module:
        """The generator of `self.direction` (what GeneratorPredictor and export use)."""
        return self.generator_for(self.direction)

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
