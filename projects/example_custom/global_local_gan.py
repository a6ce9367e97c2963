"""A GAN task written on the GAN parts (docs/extending.md walks through it): image-to-image
translation judged by two discriminators, one on the whole image and one on a random crop of it
(the global + local discriminators of Iizuka et al., 2017, for inpainting).

Only what is this task's own is written here: its networks, its generator terms (the two
adversarial terms and L1) and its phase order (both D updates in one step, then the G step). The
Adversary parts (framework/tasks/adversary.py) do the adversarial losses, DiffAugment, R1 and the
health checks (`Task.diagnose` asks them); the EMA part follows the generator; the GeneratorTask
interface tells tools/infer.py, export.py, analyze_model.py and test.py which generator to run and
what it takes, and draws the pictures from what `val_step` returns.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from framework.dist import unwrap
from framework.inference.generator import to_signed, to_unit
from framework.registry import TASKS
from framework.tasks.adversary import Adversary, check_weight
from framework.tasks.base import GeneratorTask, average_logs, micro_step, update_with
from framework.tasks.ema import EMA


@TASKS.register()
class GlobalLocalGANTask(GeneratorTask):
    """Batches hold "input" and "target" uint8 images (SyntheticPairs, PairedImageFolders).

    global_discriminator / local_discriminator   judge (input, image) pairs: the whole pair, and a
                    `crop` x `crop` window of it at a random place (the same place for real and fake)
    gan_loss, d_weight, adv_weight, r1_weight, r1_interval, d_augment   each adversary's settings
    l1_weight       weight of |G(input) - target|
    ema_decay, ema_start   the generator's moving average (null: none)
    """

    required_optimizers = ("generator", "discriminators")
    conditioning = "image"

    def __init__(self, generator: nn.Module, global_discriminator: nn.Module, local_discriminator: nn.Module,
                 crop: int = 32, gan_loss="hinge", d_weight: float = 0.5, adv_weight: float = 1.0,
                 l1_weight: float = 100.0, r1_weight: float = 0.0, r1_interval: int = 1,
                 d_augment: nn.Module | None = None, ema_decay: float | None = None, ema_start: int = 0):
        super().__init__()
        self.generator = generator
        self.global_discriminator, self.local_discriminator = global_discriminator, local_discriminator
        settings = dict(gan_loss=gan_loss, d_weight=d_weight, adv_weight=adv_weight, r1_weight=r1_weight,
                        r1_interval=r1_interval)
        self.global_adversary = Adversary(**settings, augment=d_augment, suffix="_global")
        self.local_adversary = Adversary(**settings, suffix="_local")
        self.crop, self.l1_weight = crop, check_weight("l1_weight", l1_weight)
        self.ema = EMA({"generator": generator}, ema_decay, ema_start) if ema_decay is not None else None

    def window(self, *images: torch.Tensor) -> list[torch.Tensor]:
        """The same random crop x crop window of each image (drawn from the global generator, so resume replays it)."""
        height, width = images[0].shape[-2:]
        if self.crop > min(height, width):
            raise ValueError(f"crop {self.crop} is larger than the images ({height}x{width})")
        top = int(torch.randint(0, height - self.crop + 1, ()))
        left = int(torch.randint(0, width - self.crop + 1, ()))
        return [image[..., top:top + self.crop, left:left + self.crop] for image in images]

    def train_iteration(self, batches: list[dict], optim) -> dict:
        """Every micro-batch's D terms and one D step for both discriminators, then the G step."""
        pairs = [(to_signed(batch["input"]), to_signed(batch["target"])) for batch in batches]
        self.global_adversary.start_d_step()
        self.local_adversary.start_d_step()
        fakes, d_logs = [], []
        for index, (condition, real) in enumerate(pairs):
            with micro_step(optim, index, len(batches)):
                fake = self.generator(condition)
                loss_global, logs = self.global_adversary.d_loss(self.global_discriminator, real, fake.detach(),
                                                                 condition, details=optim.log_details)
                crop_condition, crop_real, crop_fake = self.window(condition, real, fake.detach())
                loss_local, local_logs = self.local_adversary.d_loss(self.local_discriminator, crop_real, crop_fake,
                                                                     crop_condition, details=optim.log_details)
                optim.update(loss_global + loss_local, "discriminators")
            fakes.append(fake)
            d_logs.append({**logs, **local_logs})
        logs = {**average_logs(d_logs), **self.global_adversary.adapt(), **self.local_adversary.adapt()}
        g_logs = []
        for index, ((condition, real), fake) in enumerate(zip(pairs, fakes)):
            with micro_step(optim, index, len(batches)):
                terms = {"loss_g_global": self.global_adversary.g_loss(self.global_discriminator, fake, condition)[0]}
                crop_condition, crop_fake = self.window(condition, fake)
                terms["loss_g_local"] = self.local_adversary.g_loss(self.local_discriminator, crop_fake, crop_condition)[0]
                terms["loss_g_l1"] = self.l1_weight * F.l1_loss(fake, real)
                g_logs.append(update_with(optim, "generator", terms, "loss_g"))
        if self.ema is not None:
            self.ema.update({"generator": self.generator})
        return {**logs, **average_logs(g_logs)}

    def train_step(self, batch: dict, optim) -> dict:
        return self.train_iteration([batch], optim)

    def generator_for(self, direction: str | None = None) -> nn.Module:
        self.check_direction(direction)
        return self.ema["generator"] if self.ema is not None else unwrap(self.generator)

    def network_examples(self, height: int, width: int) -> dict[str, tuple[nn.Module, tuple]]:
        (condition,) = self.generator_inputs(1, height, width)
        with torch.no_grad():
            pair = torch.cat([condition, self.generator_for()(condition)], dim=1)
        return {"generator": (self.generator_for(), (condition,)),
                "global_discriminator": (unwrap(self.global_discriminator), (pair,)),
                "local_discriminator": (unwrap(self.local_discriminator), (pair[..., :self.crop, :self.crop],))}

    def val_step(self, batch: dict) -> dict:
        condition, real = to_signed(batch["input"]), to_signed(batch["target"])
        return {"fake": to_unit(self.generator_for()(condition)), "real": to_unit(real), "input": to_unit(condition)}
