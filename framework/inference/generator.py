"""A trained GAN's generator on new inputs: the EMA generator when the task keeps one.

Conditional (pix2pix): uint8 RGB images of any size -> generated images of the same size
(padded to the generator's size divisor and cropped back, as for segmentation).
Unconditional (DCGAN): `count` images from noise drawn with a seed, so a seed names a set.
"""

from __future__ import annotations

import torch

from framework.errors import ConfigError
from framework.inference.segmentation import pad_to_multiple
from framework.inference.settings import network_size_divisor


def to_signed(image: torch.Tensor) -> torch.Tensor:
    """uint8 [0, 255] -> float [-1, 1] (what generators take and make)."""
    return image.float() / 127.5 - 1


def to_unit(image: torch.Tensor) -> torch.Tensor:
    """float [-1, 1] -> float [0, 1], clamped."""
    return ((image + 1) / 2).clamp(0, 1)


def choose_direction(task, direction: str | None) -> None:
    """Point a two-way task's `eval_generator` at `direction` (AtoB or BtoA; tools/infer.py and
    tools/export.py --direction). A task with one generator takes no direction; a two-way task
    (CycleGANTask, whose `directions` names them) needs one."""
    directions = getattr(task, "directions", None)
    if directions is None:
        if direction is not None:
            raise ConfigError(f"--direction: {type(task).__name__} has one generator; --direction is for a task "
                              "that translates both ways (CycleGANTask)")
        return
    if direction not in directions:
        raise ConfigError(f"--direction: {type(task).__name__} translates both ways; choose "
                          f"{' or '.join(directions)}" + ("" if direction is None else f", not {direction!r}"))
    task.direction = direction


class GeneratorPredictor:
    def __init__(self, task):
        """`task`: a GANTask (its `eval_generator`, `conditional` and `latent_dim`)."""
        self.task = task
        self.generator = task.eval_generator
        self.size_divisor = network_size_divisor(self.generator)

    @property
    def conditional(self) -> bool:
        return self.task.conditional

    @torch.no_grad()
    def translate(self, images: torch.Tensor) -> torch.Tensor:
        """N x 3 x H x W uint8 -> N x C x H x W float images in [0, 1]."""
        height, width = images.shape[-2:]
        fake = self.generator(pad_to_multiple(to_signed(images), self.size_divisor))
        return to_unit(fake[..., :height, :width].float())

    def noise(self, count: int, seed: int, device: torch.device) -> torch.Tensor:
        generator = torch.Generator().manual_seed(seed)
        return torch.randn(count, self.task.latent_dim, 1, 1, generator=generator).to(device)

    @torch.no_grad()
    def sample(self, noise: torch.Tensor) -> torch.Tensor:
        """N x latent_dim x 1 x 1 noise -> N x C x H x W float images in [0, 1]."""
        return to_unit(self.generator(noise).float())
