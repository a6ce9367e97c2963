"""Noise that names one image: each item's draw from its own generator, seeded by a hash of
(seed, draw, item), so an item's noise never depends on which other items share its batch,
how large the batch is, or how many items there are.

Used wherever a generator's noise must be reproducible per item: tools/infer.py (an
unconditional GAN's sample i, a synthesis label map by name) and the GAN tasks' evaluation
(each validation sample by its dataset index).

A hash, not `seed + item`: with addition, seed 1's item 0 would be seed 0's item 1, and draw k
of one map another map's draw 0.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable

import torch


def noise_seed(seed: int, draw: int, item: int | str) -> int:
    """A 63-bit seed for torch.Generator from (seed, draw, item); `item` an index or a name. The
    fields are packed at fixed widths and the kind of item tagged, so no two tuples share bytes."""
    key = struct.pack("<QQ", seed, draw)
    key += b"n" + item.encode("utf-8") if isinstance(item, str) else b"i" + struct.pack("<Q", item)
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1


def item_noise(shape: tuple[int, ...], seed: int, draw: int, items: Iterable[int | str]) -> torch.Tensor:
    """len(items) x shape float32 standard normal noise on the CPU, row i from item i's own generator."""
    rows = [torch.randn(*shape, generator=torch.Generator().manual_seed(noise_seed(seed, draw, item)))
            for item in items]
    return torch.stack(rows) if rows else torch.empty(0, *shape)
