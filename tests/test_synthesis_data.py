"""Data for semantic image synthesis: SyntheticTextures (framework/data/textures.py), SPADE's label/image
folders (framework/data/label_folders.py) and the start-up check of label values (analysis/dataset_scan.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from framework.analysis.dataset_scan import check_label_maps
from framework.data import LabelImageFolders, SegmentationDataset, SyntheticTextures
from framework.data.textures import TEXTURE_CLASSES
from framework.errors import DataError
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


# ----------------------------------------------------------------------------- SPADE's custom layout


def _write_pair(root, stem: str, label: np.ndarray, image_suffix: str = ".png", image_size=None) -> None:
    (root / "labels").mkdir(exist_ok=True)
    (root / "images").mkdir(exist_ok=True)
    Image.fromarray(label.astype(np.uint8)).save(root / "labels" / f"{stem}.png")
    height, width = image_size or label.shape
    image = np.full((height, width, 3), 100, np.uint8)
    Image.fromarray(image).save(root / "images" / f"{stem}{image_suffix}")


def _folders(root, **kwargs) -> LabelImageFolders:
    return LabelImageFolders(label_dir=str(root / "labels"), image_dir=str(root / "images"), classes=["a", "b", "c"],
                             **kwargs)


def test_label_and_image_folders_pair_by_stem(tmp_path):
    _write_pair(tmp_path, "b", np.full((6, 8), 2), ".jpg")
    _write_pair(tmp_path, "a", np.array([[0, 1], [255, 2]]))
    dataset = DATASETS.build({"type": "LabelImageFolders", "label_dir": str(tmp_path / "labels"),
                              "image_dir": str(tmp_path / "images"), "classes": ["a", "b", "c"]})
    assert isinstance(dataset, SegmentationDataset) and len(dataset) == 2
    first, second = dataset[0], dataset[1]
    assert first["name"] == "a" and first["mask"].tolist() == [[0, 1], [255, 2]]
    assert second["name"] == "b" and second["image"].shape == (3, 6, 8) and (second["mask"] == 2).all()
    assert sorted(first) == sorted(SyntheticTextures(num_samples=1)[0])  # the same sample dict


def test_files_without_a_partner_are_named_both_ways_in_one_line(tmp_path):
    _write_pair(tmp_path, "a", np.zeros((4, 4)))
    _write_pair(tmp_path, "b", np.zeros((4, 4)))
    (tmp_path / "images" / "b.png").unlink()
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(tmp_path / "images" / "c.jpg")
    with pytest.raises(DataError) as caught:
        DATASETS.build({"type": "LabelImageFolders", "label_dir": str(tmp_path / "labels"),
                        "image_dir": str(tmp_path / "images"), "classes": ["a", "b", "c"]}, path="data.train.dataset")
    message = str(caught.value)
    assert "\n" not in message and message.startswith("data.train.dataset (LabelImageFolders): ")
    assert "1 label file(s) in " in message and "have no image in " in message and ": b.png" in message
    assert "1 image(s) in " in message and "have no label file in " in message and ": c.jpg" in message
    assert "a.png" not in message


def test_pairs_of_different_sizes_are_refused_at_start_up(tmp_path):
    _write_pair(tmp_path, "good", np.zeros((4, 6)))
    _write_pair(tmp_path, "wide", np.zeros((4, 6)), image_size=(4, 7))
    with pytest.raises(DataError, match=r"1 label/image pair\(s\) differ in size .*: wide \(image 4x7, label 4x6\)$"):
        _folders(tmp_path)
    unchecked = _folders(tmp_path, check_sizes=False)  # left to the sample's own check, when it is read
    assert unchecked[0]["name"] == "good"
    with pytest.raises(DataError, match="wide.png: mask is 4x6 but its image is 4x7"):
        unchecked[1]
    with pytest.raises(DataError, match="labels/wide.png: mask is 4x6 but its image is 4x7$"):  # every file, at start-up
        check_label_maps(unchecked)


def test_a_label_map_drawn_on_the_stored_pixels_of_a_turned_photo_is_named_as_such(tmp_path):
    from test_exif_orientation import write_oriented

    _write_pair(tmp_path, "photo", np.zeros((4, 6)))
    write_oriented(tmp_path / "images" / "photo.png", np.zeros((4, 6, 3), np.uint8), 6)  # shown 6x4
    with pytest.raises(DataError, match=r"photo.png: mask is 4x6 but its image is 6x4; the image is stored 4x6 with "
                                        r"EXIF orientation 6 \(turned 90 degrees clockwise when shown\)"):
        check_label_maps(_folders(tmp_path, check_sizes=False))
    write_oriented(tmp_path / "images" / "photo.png", np.zeros((4, 6, 3), np.uint8), 3)  # turned 180: same size
    check_label_maps(_folders(tmp_path))


def test_label_values_are_checked_at_start_up_at_the_class_boundary(tmp_path):
    _write_pair(tmp_path, "a", np.array([[0, 1], [2, 255]]))  # 2 = num_classes - 1 and the ignore label: fine
    check_label_maps(_folders(tmp_path))
    _write_pair(tmp_path, "b", np.array([[0, 3], [3, 1]]))  # 3 = num_classes
    with pytest.raises(DataError, match=r"labels/b.png: mask values \[3\] outside \[0, 3\) \(ignore_index 255\)$"):
        check_label_maps(_folders(tmp_path))
    other = tmp_path / "other"
    other.mkdir()
    _write_pair(other, "b", np.array([[0, 3], [3, 1]]))
    check_label_maps(_folders(other, ignore_index=3))  # 3 is the ignore label there
    _write_pair(tmp_path, "c", np.array([[7, 1], [1, 1]]))
    with pytest.raises(DataError, match=r"b.png: mask values \[3\] .* \(and 1 more file\(s\); python tools/check_dataset.py"):
        check_label_maps(_folders(tmp_path), workers=1)
    check_label_maps(SyntheticTextures(num_samples=8))  # a generated dataset: its masks from load_sample
