"""N-channel and 1-channel images: 16-bit PNG, multi-page TIFF, .npy, and a 4-channel training run."""

import json

import cv2
import numpy as np
import pytest
import torch

from framework.data import ImageMaskFolder
from framework.errors import DataError
from support import REPO, call_tool


def write_folder(root, writer, suffix, count=4, size=32):
    """Images written by `writer(path, array)` from known arrays, and index masks."""
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    rng = np.random.default_rng(0)
    arrays = {}
    for i in range(count):
        array = writer(root / "images" / f"s{i}{suffix}", rng)
        arrays[f"s{i}"] = array
        cv2.imwrite(str(root / "masks" / f"s{i}.png"), rng.integers(0, 3, (size, size), dtype=np.uint8))
    return arrays


def png16(path, rng):
    array = rng.integers(0, 65536, (32, 32), dtype=np.uint16)
    cv2.imwrite(str(path), array)
    return array[:, :, None] / 257.0


def tiff_pages(path, rng):
    pages = [rng.integers(0, 256, (32, 32), dtype=np.uint8) for _ in range(4)]
    cv2.imwritemulti(str(path), pages)
    return np.stack(pages, axis=2)


def npy(path, rng):
    array = rng.random((32, 32, 5), dtype=np.float32) * 255
    np.save(path, array)
    return array


@pytest.mark.parametrize("writer, suffix, channels", [(png16, ".png", 1), (tiff_pages, ".tif", 4), (npy, ".npy", 5)])
def test_images_of_any_channel_count_are_read_exactly(tmp_path, writer, suffix, channels):
    arrays = write_folder(tmp_path, writer, suffix)
    data = ImageMaskFolder(str(tmp_path), classes=["a", "b", "c"], channels=channels,
                           pipeline=[{"type": "HorizontalFlip", "p": 1.0}])
    sample = data[0]
    assert sample["image"].shape == (channels, 32, 32)
    expected = torch.from_numpy(np.ascontiguousarray(arrays[sample["name"]][:, ::-1].transpose(2, 0, 1)))
    torch.testing.assert_close(sample["image"].double(), expected.double(), atol=1e-3, rtol=0)
    with pytest.raises(DataError, match=rf"s0{suffix}: expected {channels + 1} channel\(s\), got an image of shape"):
        ImageMaskFolder(str(tmp_path), classes=["a", "b", "c"], channels=channels + 1)[0]


def test_a_4_channel_encoder_unet_trains_from_rgb_weights(tmp_path):
    import torchvision

    write_folder(tmp_path / "data", tiff_pages, ".tif", count=6)
    torch.save(torchvision.models.resnet18().state_dict(), tmp_path / "resnet18.pth")
    dataset = f"{{type: ImageMaskFolder, root: {tmp_path / 'data'}, classes: [a, b, c], channels: 4}}"
    result = call_tool(
        "train", "--config", REPO / "configs/segmentation/encoder_unet_resnet34_shapes.yaml",
        "--work-dir", tmp_path / "run", "device=cpu", "task.num_classes=3", "task.class_names=[a, b, c]",
        "+task.mean=[0.5, 0.5, 0.5, 0.5]", "+task.std=[0.25, 0.25, 0.25, 0.25]",
        "task.model.encoder=resnet18", "task.model.in_channels=4", f"task.model.encoder_weights={tmp_path / 'resnet18.pth'}",
        "+task.model.decoder_channels=[16, 16, 8, 8, 8]", f"data.train.dataset={dataset}", f"data.val.dataset={dataset}",
        "data.train.batch_size=2", "data.train.num_workers=0", "data.val.batch_size=2",
        "metrics=[{type: SegmentationMetrics, num_classes: 3}]", "train.max_iters=2", "train.val_interval=2",
        "train.log_interval=1", "hooks=[]")
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "run" / "load_report.json").read_text())["task.model (encoder_weights)"]
    assert report["counts"]["adapted"] == 1 and report["counts"]["shape_mismatched"] == 0
    assert "mIoU" in json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])

    # infer and export take the 4 channels the network was trained on; an RGB image is one line
    run = ["--config", REPO / "configs/segmentation/encoder_unet_resnet34_shapes.yaml", "--checkpoint",
           tmp_path / "run" / "checkpoints" / "iter_2.pth", "task.num_classes=3", "task.class_names=[a, b, c]",
           "+task.mean=[0.5, 0.5, 0.5, 0.5]", "+task.std=[0.25, 0.25, 0.25, 0.25]", "task.model.encoder=resnet18",
           "task.model.in_channels=4", "task.model.encoder_weights=null", "+task.model.decoder_channels=[16, 16, 8, 8, 8]"]
    result = call_tool("infer", *run, "--input", tmp_path / "data" / "images" / "s0.tif", "--output", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    from framework.data.folder import read_index_mask

    assert read_index_mask(str(tmp_path / "out" / "masks" / "s0.png")).shape == (32, 32)
    cv2.imwrite(str(tmp_path / "rgb.png"), np.zeros((32, 32, 3), dtype=np.uint8))
    result = call_tool("infer", *run, "--input", tmp_path / "rgb.png", "--output", tmp_path / "out2")
    assert result.returncode != 0 and f"{tmp_path / 'rgb.png'}: expected 4 channel(s)" in result.stderr
    result = call_tool("export", *run, "--format", "torchscript", "--size", "32", "32", "--output", tmp_path / "m.pt")
    assert result.returncode == 0, result.stderr
    assert torch.jit.load(str(tmp_path / "m.pt"))(torch.zeros(1, 4, 32, 32)).shape == (1, 3, 32, 32)
