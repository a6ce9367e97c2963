"""Data for semantic image synthesis: SyntheticTextures (framework/data/textures.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from framework.data import SegmentationDataset, SyntheticTextures
from framework.data.textures import TEXTURE_CLASSES
from framework.registry import DATASETS


def _arrays(dataset: SyntheticTextures) -> tuple[np.ndarray, np.ndarray]:
    samples = [dataset.load_sample(i) for i in range(len(dataset))]
    return np.stack([s[0] for s in samples]), np.stack([s[1] for s in samples])


def test_samples_are_segmentation_samples_seeded_and_deterministic():
    dataset = DATASETS.build({"type": "SyntheticTextures", "num_samples": 4, "size": [32, 48], "seed": 3})
    assert isinstance(dataset, SegmentationDataset) and dataset.class_names == TEXTURE_CLASSES
    sample = dataset[1]
    assert sample["image"].shape == (3, 32, 48) and sample["image"].dtype == torch.uint8
    assert sample["mask"].shape == (32, 48) and sample["mask"].dtype == torch.int64
    assert sample["name"] == "textures_000001" and sample["index"] == 1
    again = SyntheticTextures(num_samples=4, size=[32, 48], seed=3)[1]
    assert torch.equal(sample["image"], again["image"]) and torch.equal(sample["mask"], again["mask"])
    other_seed = SyntheticTextures(num_samples=4, size=[32, 48], seed=4)[1]
    assert not torch.equal(sample["image"], other_seed["image"])
    assert not torch.equal(dataset[0]["image"], sample["image"])
    with pytest.raises(IndexError):
        dataset.load_sample(4)


def test_every_region_has_its_images_mean_colour_and_every_class_the_same_mean():
    images, masks = _arrays(SyntheticTextures(num_samples=300, seed=0))
    images = images.astype(np.float64)
    assert images.min() > 0 and images.max() < 255  # nothing clipped: the means are not bent
    for image, mask in zip(images[:100], masks[:100]):
        mean = image.reshape(-1, 3).mean(axis=0)
        for value in np.unique(mask):
            # a flat painting of each region's mean colour is one colour per image
            assert np.abs(image[mask == value].mean(axis=0) - mean).max() < 1.5
    class_means = np.stack([images[masks == c].mean(axis=0) for c in range(7)])
    assert all((masks == c).mean() > 0.08 for c in range(7))  # every class drawn often
    # Over 300 images the class means differ only by which images drew which class.
    assert np.abs(class_means - class_means.mean(axis=0)).max() < 8


def _pixel_accuracy_after_training(train_images, train_masks, val_images, val_masks, steps=150) -> float:
    """A tiny 3-layer CNN trained briefly; its pixel accuracy on the validation images."""
    torch.manual_seed(0)
    network = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=2, dilation=2),
                            nn.ReLU(), nn.Conv2d(16, 7, 1))
    optimizer = torch.optim.Adam(network.parameters(), lr=1e-2)

    def prepare(images):
        return (torch.from_numpy(images).permute(0, 3, 1, 2).float() - 128) / 64

    x, y = prepare(train_images), torch.from_numpy(train_masks).long()
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps):
        batch = torch.randint(0, len(x), (8,), generator=generator)
        loss = F.cross_entropy(network(x[batch]), y[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        predicted = network(prepare(val_images)).argmax(dim=1)
    return (predicted == torch.from_numpy(val_masks).long()).float().mean().item()


def _painted(images: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """Each region painted in its own mean colour."""
    painted = np.empty_like(images)
    for i, (image, mask) in enumerate(zip(images, masks)):
        for value in np.unique(mask):
            painted[i][mask == value] = image[mask == value].mean(axis=0).round()
    return painted


def test_texture_tells_the_classes_apart_and_a_flat_painting_does_not():
    train_images, train_masks = _arrays(SyntheticTextures(num_samples=96, size=32, seed=0))
    val_images, val_masks = _arrays(SyntheticTextures(num_samples=32, size=32, seed=1))
    chance = max((val_masks == c).mean() for c in range(7))
    textured = _pixel_accuracy_after_training(train_images, train_masks, val_images, val_masks)
    flat = _pixel_accuracy_after_training(_painted(train_images, train_masks), train_masks,
                                          _painted(val_images, val_masks), val_masks)
    assert textured > 0.6, textured
    assert flat < chance + 0.1, (flat, chance)
