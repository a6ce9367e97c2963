"""The history of generated images a CycleGAN discriminator is trained on (Shrivastava et al.,
2017; the CycleGAN paper's image buffer), as in the original implementation:

    for each fake of the batch, in order:
        pool not full yet     -> store it, hand it to D
        otherwise, heads (p=0.5) -> hand D a random stored image, store the new fake in its place
                   tails          -> hand D the new fake

Its random choices come from its own torch.Generator, not the global one, so they do not shift
when something else draws random numbers, and the pool (images and generator state) is part of
the checkpoint: a resumed run continues with the same history. Each process of a DDP run keeps
its own pool of its own fakes, seeded differently (see `CycleGANTask`).
"""

from __future__ import annotations

import torch


class ImagePool:
    def __init__(self, size: int, seed: int):
        if size < 0:
            raise ValueError(f"pool_size must be >= 0 (0: no pool), got {size}")
        self.size = size
        self.seed = seed
        self.generator = torch.Generator().manual_seed(seed)
        self.images: list[torch.Tensor] = []

    def query(self, fakes: torch.Tensor) -> torch.Tensor:
        """The images D sees for this batch of (detached) fakes."""
        if self.size == 0:
            return fakes
        out = []
        for fake in fakes.detach():
            fake = fake.unsqueeze(0)
            if len(self.images) < self.size:
                self.images.append(fake.clone())
                out.append(fake)
            elif torch.rand((), generator=self.generator).item() > 0.5:
                slot = int(torch.randint(0, self.size, (), generator=self.generator))
                out.append(self.images[slot])
                self.images[slot] = fake.clone()
            else:
                out.append(fake)
        return torch.cat(out)

    def state_dict(self) -> dict:
        images = torch.cat(self.images).cpu() if self.images else torch.empty(0)
        return {"images": images, "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict, device: torch.device) -> None:
        images = state["images"]
        self.images = [image.unsqueeze(0).to(device) for image in images] if images.numel() else []
        self.generator.set_state(state["generator"])
