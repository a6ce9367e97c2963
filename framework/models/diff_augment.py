"""DiffAugment (Zhao et al., 2020) with the adaptive probability of ADA (Karras et al., 2020):
differentiable augmentations of everything the discriminator sees, real and fake alike, so a
discriminator trained on few images cannot memorise them while the generator still gets
gradients through the augmentation.

    task: {type: GANTask, d_augment: {type: DiffAugment, policy: [color, translation, cutout], p: 1.0}}
    d_augment: {type: DiffAugment, adaptive: true, target: 0.6}       # p from 0, adjusted (ADA)

`policy`: color (brightness, saturation, contrast), translation (shift by up to 1/8 of the
side, zero fill), cutout (a zeroed square of half the side). Each sample is augmented with
probability p (each policy drawn apart); p 1.0 is the original DiffAugment.

`forward(*images)` draws one transform per sample and applies it to every tensor given, so a
conditional GAN's (input, image) pair is moved, recoloured and cut alike.

Adaptive p: `observe(verdicts)` adds up sign(D(real)) per sample; every `interval` D steps
r_t = E[sign(D(real))] (over every rank), and p moves by sign(r_t - target) x (images seen
since the last adjustment) / `speed_images`, clipped to [0, 1]. p, the sums and the counter
are buffers: checkpointed and resumed exactly. All of it stays on the device (no host sync).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from framework.dist import all_reduce_sum_
from framework.registry import MODELS, did_you_mean

POLICIES = ("color", "translation", "cutout")


@MODELS.register()
class DiffAugment(nn.Module):
    def __init__(self, policy: list[str] | tuple[str, ...] = POLICIES, p: float = 1.0, adaptive: bool = False,
                 target: float = 0.6, interval: int = 4, speed_images: int = 20000, translation: float = 0.125,
                 cutout: float = 0.5):
        super().__init__()
        policy = [policy] if isinstance(policy, str) else list(policy)
        for name in policy:
            if name not in POLICIES:
                raise ValueError(f"policy: unknown '{name}'{did_you_mean(str(name), POLICIES)} "
                                 f"(choose from {', '.join(POLICIES)})")
        if not policy:
            raise ValueError(f"policy: name at least one of {', '.join(POLICIES)}")
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p must be in [0, 1], got {p}")
        if not 0.0 < target < 1.0:
            raise ValueError(f"target must be in (0, 1), got {target}")
        if not isinstance(interval, int) or interval < 1:
            raise ValueError(f"interval must be a positive integer, got {interval!r}")
        if not speed_images > 0:
            raise ValueError(f"speed_images must be positive, got {speed_images}")
        if not 0.0 <= translation <= 0.5:
            raise ValueError(f"translation must be a fraction of the side in [0, 0.5], got {translation}")
        if not 0.0 < cutout <= 1.0:
            raise ValueError(f"cutout must be a fraction of the side in (0, 1], got {cutout}")
        self.policy, self.adaptive, self.target = policy, adaptive, target
        self.interval, self.speed_images = interval, speed_images
        self.translation, self.cutout = translation, cutout
        self.register_buffer("p", torch.tensor(0.0 if adaptive else float(p)))
        # (sum of sign(D(real)), samples) since the last adjustment, and D steps observed.
        self.register_buffer("sign_sum", torch.zeros(2))
        self.register_buffer("observed", torch.zeros((), dtype=torch.int64))
        # The count in a python int too, so deciding on an adjustment never waits for the device
        # (read back from the buffer after a checkpoint is loaded).
        self._observed: int | None = None
        self.register_load_state_dict_post_hook(lambda module, _: setattr(module, "_observed", None))

    # ------------------------------------------------------------------ augmenting

    def forward(self, *images: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The tensors given (N x C x H x W each, same N, H, W), augmented with one draw per sample."""
        first = images[0]
        n, device = first.shape[0], first.device
        out = list(images)
        if "color" in self.policy:
            chosen = self._chosen(n, device)
            brightness = (torch.rand(n, 1, 1, 1, device=device) - 0.5) * chosen
            saturation = 1 + (torch.rand(n, 1, 1, 1, device=device) * 2 - 1) * chosen  # x [0, 2]
            contrast = 1 + (torch.rand(n, 1, 1, 1, device=device) - 0.5) * chosen      # x [0.5, 1.5]
            # where(), not neutral factors: an unchosen sample stays bit-identical
            out = [torch.where(chosen.bool(), self._color(x, brightness, saturation, contrast), x) for x in out]
        if "translation" in self.policy:
            chosen = self._chosen(n, device)
            height, width = first.shape[-2:]
            max_dy, max_dx = int(height * self.translation + 0.5), int(width * self.translation + 0.5)
            dy = torch.randint(-max_dy, max_dy + 1, (n,), device=device) * chosen.view(n).long()
            dx = torch.randint(-max_dx, max_dx + 1, (n,), device=device) * chosen.view(n).long()
            out = [self._translate(x, dy, dx, max_dy, max_dx) for x in out]
        if "cutout" in self.policy:
            chosen = self._chosen(n, device)
            height, width = first.shape[-2:]
            cut_h, cut_w = int(height * self.cutout + 0.5), int(width * self.cutout + 0.5)
            top = torch.randint(0, height + 1 - cut_h, (n, 1, 1), device=device)
            left = torch.randint(0, width + 1 - cut_w, (n, 1, 1), device=device)
            rows = torch.arange(height, device=device).view(1, height, 1)
            cols = torch.arange(width, device=device).view(1, 1, width)
            inside = (rows >= top) & (rows < top + cut_h) & (cols >= left) & (cols < left + cut_w)
            keep = 1 - (inside.unsqueeze(1).to(first.dtype) * chosen)
            out = [x * keep.to(x.dtype) for x in out]
        return tuple(out)

    def _chosen(self, n: int, device: torch.device) -> torch.Tensor:
        """1.0 for the samples augmented by this policy (probability p), 0.0 for the others."""
        return (torch.rand(n, 1, 1, 1, device=device) < self.p).float()

    @staticmethod
    def _color(x, brightness, saturation, contrast):
        x = x + brightness.to(x.dtype)
        mean = x.mean(dim=1, keepdim=True)
        x = (x - mean) * saturation.to(x.dtype) + mean
        mean = x.mean(dim=(1, 2, 3), keepdim=True)
        return (x - mean) * contrast.to(x.dtype) + mean

    @staticmethod
    def _translate(x, dy, dx, max_dy, max_dx):
        """Each sample shifted by (dy, dx) pixels with zeros coming in: a gather from the padded image."""
        n, _, height, width = x.shape
        padded = F.pad(x, [max_dx, max_dx, max_dy, max_dy])
        rows = torch.arange(height, device=x.device).view(1, height) + max_dy - dy.view(n, 1)  # N x H
        cols = torch.arange(width, device=x.device).view(1, width) + max_dx - dx.view(n, 1)    # N x W
        batch = torch.arange(n, device=x.device).view(n, 1, 1)
        # Advanced indices around a slice: the result is N x H x W x C.
        return padded[batch, :, rows.view(n, height, 1), cols.view(n, 1, width)].permute(0, 3, 1, 2)

    # ------------------------------------------------------------------ adapting p

    @torch.no_grad()
    def observe(self, verdicts: torch.Tensor) -> None:
        """Record D's per-sample verdicts on real images (before the D update); adjusts p
        every `interval` calls when adaptive. Every rank must call it alike (an all_reduce)."""
        if not self.adaptive:
            return
        if self._observed is None:
            self._observed = int(self.observed)
        self._observed += 1
        self.observed.fill_(self._observed)
        self.sign_sum[0] += verdicts.detach().float().sign().sum()
        self.sign_sum[1] += verdicts.shape[0]
        if self._observed % self.interval:
            return
        totals = all_reduce_sum_(self.sign_sum.clone())  # every rank adjusts p alike
        r_t = totals[0] / totals[1]
        self.p.copy_((self.p + torch.sign(r_t - self.target) * totals[1] / self.speed_images).clamp(0.0, 1.0))
        self.sign_sum.zero_()
