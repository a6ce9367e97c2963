"""Targets of processes forked by tests/test_infer.py and tests/test_class_weights.py: each
measurement runs in a fresh process so one cannot reuse memory another freed."""

import json
from pathlib import Path

import torch
from torch import nn

CROP = 32


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def wide_network() -> nn.Module:
    """64 channels computed cheaply: activations dwarf the image and the logits, FLOPs stay few."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 2, 1)).eval()


def inference_peak_memory(size: int, mode: str, tile_batch: int, out: str) -> None:
    """Peak resident memory (bytes) added while predicting a size x size image, written to `out`."""
    from framework.inference.segmentation import SegmentationPredictor
    from framework.inference.settings import InferenceSettings

    torch.set_num_threads(1)
    network = wide_network()
    image = torch.rand(1, 3, size, size)
    settings = InferenceSettings(mode=mode, crop=CROP, stride=CROP, tile_batch=tile_batch)
    predictor = SegmentationPredictor(network, settings)
    with torch.no_grad():
        predictor.logits(image[..., :CROP, :CROP])  # warm-up: one-off allocations are not the image's
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current size
    before = _status_kb("VmRSS")
    logits = predictor.logits(image)
    peak = _status_kb("VmHWM")
    Path(out).write_text(json.dumps({"added": (peak - before) * 1024, "logits": logits.numel() * 4}))


def auto_weights_on_rank(rank: int, port: int, work_dir: str, out: str) -> None:
    """One of two gloo processes resolving `weight: auto`; rank 1's dataset differs on purpose,
    so equal weights prove they came from rank 0. Writes this rank's weights to `out`."""
    import torch.distributed as dist

    from framework.analysis.class_weights import resolve_auto_class_weights
    from framework.data.shapes import SyntheticShapes
    from framework.losses.cross_entropy import CrossEntropyLoss

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        loss = CrossEntropyLoss(weight="auto", weight_method="inverse_log")
        dataset = SyntheticShapes(num_samples=6, size=32, seed=rank)
        resolve_auto_class_weights(loss, dataset, work_dir if rank == 0 else None, {"seed": rank})
        Path(out).write_text(json.dumps(loss.weight.tolist()))
    finally:
        dist.destroy_process_group()
