"""The mode-seeking term (Mao et al., 2019, "Mode Seeking Generative Adversarial Networks for
Diverse Image Synthesis", MSGAN): a conditional generator learns to ignore its noise (one label
map, one image, whatever the noise), and nothing in the adversarial loss asks otherwise. MSGAN
draws each input twice, with noises z1 and z2, and maximises

    ratio = mean |G(x, z1) - G(x, z2)| / mean |z1 - z2|

by minimising 1 / (ratio + eps), so that images move apart as much as their noises do. Two forms
(`mode_seeking_loss(..., form=)`), in float32 whatever the images' dtype (under bfloat16 two close
images differ by rounding alone):

- "batch": MSGAN's own, one ratio of the means over the whole (micro-)batch, 1 / (ratio + eps).
- "per_sample": a ratio r_i per input (the means over its pixels and its noise entries). Unbounded,
  mean_i 1 / (r_i + eps) gives a near-collapsed input the gradient 1 / (r_i + eps)^2: with
  eps 1e-5, 10^5 and more times another's, so one map decides the step. With a `floor` (the task
  passes the batch's mean ratio m, detached) the term is mean_i BOUND / (r_i + m + eps): an input
  at ratio 0 pulls at most BOUND = 4 times as hard as one at the mean ratio, and at equal ratios
  every input pulls as hard as in the unbounded form (its value there is twice the unbounded one's).
"""

from __future__ import annotations

import torch

EPS = 1e-5  # MSGAN's
FORMS = ("per_sample", "batch")
BOUND = 4.0  # 4 / (r + m)^2 at r = m equals 1 / m^2, the unbounded gradient at equal ratios


def check_form(form: str) -> str:
    if form not in FORMS:
        raise ValueError(f"mode_seeking_form must be one of {', '.join(FORMS)}, got {form!r}")
    return form


def spread_ratios(first: torch.Tensor, second: torch.Tensor, first_noise: torch.Tensor,
                  second_noise: torch.Tensor) -> torch.Tensor:
    """(N,) float32: each input's mean |image difference| / mean |noise difference|."""
    image_spread = (first.float() - second.float()).abs().flatten(1).mean(1)
    noise_spread = (first_noise.float() - second_noise.float()).abs().flatten(1).mean(1)
    return image_spread / noise_spread


def mode_seeking_loss(first: torch.Tensor, second: torch.Tensor, first_noise: torch.Tensor,
                      second_noise: torch.Tensor, eps: float = EPS, form: str = "per_sample",
                      floor: torch.Tensor | None = None) -> torch.Tensor:
    """first, second: N x ... images of the same N inputs; first_noise, second_noise: N x ... their
    noises. `floor`: the per-sample form's bound (see the module's docstring); None: unbounded."""
    if check_form(form) == "batch":
        ratio = ((first.float() - second.float()).abs().mean()
                 / (first_noise.float() - second_noise.float()).abs().mean())
        return 1 / (ratio + eps)
    ratios = spread_ratios(first, second, first_noise, second_noise)
    if floor is None:
        return (1 / (ratios + eps)).mean()
    return (BOUND / (ratios + floor.detach() + eps)).mean()
