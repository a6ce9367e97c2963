"""Warnings for the two ways a GAN run fails quietly, read from the averaged logs at each
log interval (no extra device work):

- the discriminator wins outright: its loss stays near 0 (it tells real from fake perfectly,
  so the generator's gradients vanish);
- the generator collapses: its outputs hardly differ across a batch (`fake_spread`, the mean
  over pixels of the standard deviation across the batch, on the [-1, 1] scale).

Each warns once when the condition has held for `window` log intervals in a row, and again
only after it cleared. `suffix` watches one of several discriminators (CycleGAN's `loss_d_a`,
`fake_spread_a`, ... with suffix "_a").
"""

from __future__ import annotations


class GANHealth:
    def __init__(self, watch_d_loss: bool = True, d_loss_floor: float = 0.01, spread_floor: float = 0.01,
                 window: int = 3, suffix: str = ""):
        self.watch_d_loss = watch_d_loss  # wgan-gp's critic loss is unbounded: no "near 0"
        self.d_loss_floor = d_loss_floor
        self.spread_floor = spread_floor
        self.window = window
        self._streaks = {"d_wins": 0, "collapse": 0}
        self.loss_key, self.spread_key = f"loss_d{suffix}", f"fake_spread{suffix}"
        self.logit_keys = (f"d_real_logit{suffix}", f"d_fake_logit{suffix}")

    def check(self, logged: dict[str, float]) -> list[str]:
        conditions = {
            "d_wins": self.watch_d_loss and self.loss_key in logged and logged[self.loss_key] < self.d_loss_floor,
            "collapse": self.spread_key in logged and logged[self.spread_key] < self.spread_floor,
        }
        warnings = []
        for name, holds in conditions.items():
            self._streaks[name] = self._streaks[name] + 1 if holds else 0
            if self._streaks[name] == self.window:
                warnings.append(self._message(name, logged))
        return warnings

    def _message(self, name: str, logged: dict[str, float]) -> str:
        if name == "d_wins":
            real, fake = (logged.get(key, float("nan")) for key in self.logit_keys)
            return (f"warning: the discriminator wins outright: {self.loss_key} {logged[self.loss_key]:.2e} < "
                    f"{self.d_loss_floor} for {self.window} log intervals (D logits real {real:.2f}, "
                    f"fake {fake:.2f}); the generator gets no useful "
                    "gradient. Lower D's learning rate, raise d_weight's counterpart adv_weight, or add noise/dropout to D")
        return (f"warning: the generator's outputs collapse: {self.spread_key} {logged[self.spread_key]:.2e} < "
                f"{self.spread_floor} across the batch for {self.window} log intervals (mode collapse)")
