"""On a CUDA device: what no CPU run can show. Every test here is marked `cuda` and skipped on a
machine without one (tests/conftest.py); `pytest -m cuda` runs them alone.

- `device: auto` trains on the GPU, `amp.enabled: auto` picks bfloat16 there, and the checkpoint
  holds CPU tensors only: it loads with a plain `torch.load` on a machine without a GPU, and
  tools/test.py evaluates it there.
- float16 AMP with two optimizers (a GAN's G and D, one GradScaler): the run trains, and a run
  resumed from its middle checkpoint ends bit-identical (`deterministic: true`).
- Data: pinned batches and worker processes by default when the run trains on CUDA.
- Processes: `device: cpu` on a machine with a GPU gets gloo (NCCL refuses CPU tensors), and
  `device: cuda` names each rank's own GPU.
- Every shipped config trains two iterations on the GPU, also with `deterministic: warn`.

pytest.ini's `--dist loadfile` gives this whole file to one xdist worker: on a GPU machine,
`pytest -m cuda -n 0` says the same with less start-up.
"""

import json

import pytest
import torch

from framework.config import load_config, to_plain
from framework.data.loader import build_dataloader
from framework.engine.build import select_device
from published_fixtures import reads_published_data
from support import REPO, TINY_SEGMENTATION, named, run_forked_ranks, run_tool

pytestmark = pytest.mark.cuda

SEGMENTATION = REPO / "configs/segmentation/unet_shapes.yaml"
PIX2PIX = REPO / "projects/pix2pix/configs/pix2pix_shapes.yaml"
ON_THE_GPU = [*TINY_SEGMENTATION, "device=auto"]  # later overrides win: TINY_SEGMENTATION says cpu


def tensors(obj, where="checkpoint"):
    """(where, tensor) for every tensor in a nested checkpoint."""
    if isinstance(obj, torch.Tensor):
        yield where, obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from tensors(value, f"{where}.{key}")
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield from tensors(value, f"{where}[{i}]")


def test_auto_trains_on_the_gpu_in_bfloat16_and_the_checkpoint_loads_without_one(tmp_path):
    run = tmp_path / "run"
    result = run_tool("train", "--config", SEGMENTATION, "--work-dir", run, *ON_THE_GPU)
    assert result.returncode == 0, result.stderr
    assert "device cuda:0" in result.stdout and "precision bfloat16 (amp.enabled: auto)" in result.stdout
    checkpoint = run / "checkpoints/iter_20.pth"

    state = torch.load(checkpoint, weights_only=True)  # no map_location: where the tensors were saved
    placed = {where: t.device.type for where, t in tensors(state)}
    assert placed and set(placed.values()) == {"cpu"}, {w: d for w, d in placed.items() if d != "cpu"}
    weights = [t for where, t in tensors(state["task"]) if t.is_floating_point()]
    assert weights and all(t.dtype == torch.float32 and t.isfinite().all() for t in weights)

    # tools/test.py on the GPU reproduces the run's last evaluation; on the CPU it loads the same file.
    # Not to 1e-6 on the GPU: with `cudnn_benchmark: true` (the default) each process times cuDNN's
    # algorithms anew and may pick others, whose bf16 sums differ in the last bits and flip a few
    # pixels' argmax (one pixel of the 16 64x64 images moves an IoU by about 1e-5). On one H100 on
    # 2026-11-26 this test passed at 1e-6 and failed in the next run (the assertion unseen: the log
    # was cut short); this tolerance is the suspected cause's, not a confirmed fix.
    trained = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    for device, tolerance in (("cuda", 2e-3), ("cpu", 0.05)):  # bf16 on the GPU; the CPU's own precision
        out = tmp_path / f"test_{device}"
        result = run_tool("test", "--config", SEGMENTATION, "--checkpoint", checkpoint, "--work-dir", out,
                          *TINY_SEGMENTATION, f"device={device}")
        assert result.returncode == 0, result.stderr
        tested = json.loads((out / "metrics.json").read_text())
        assert tested["mIoU"] == pytest.approx(trained["mIoU"], abs=tolerance), device


GAN_FLOAT16 = [
    "device=cuda", "deterministic=true", "amp.enabled=true", "amp.dtype=float16",
    "task.generator.num_downs=5", "task.generator.base_channels=8", "+task.generator.dropout=0.5",
    "task.discriminator.base_channels=8", "+task.ema_decay=0.9", "data.train.dataset.size=32",
    "data.train.dataset.num_samples=16", "data.train.batch_size=4", "data.val.dataset.size=32",
    "data.val.dataset.num_samples=8", "data.val.batch_size=8", "train.max_iters=8", "train.ckpt_interval=4",
    "train.val_interval=4", "train.val_at_start=false", "train.log_interval=1", "train.keep_last=0",
]


def test_float16_gan_with_two_optimizers_resumes_bit_identical(tmp_path):
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    result = run_tool("train", "--config", PIX2PIX, "--work-dir", reference, *GAN_FLOAT16)
    assert result.returncode == 0, result.stderr
    assert "precision float16" in result.stdout
    result = run_tool("train", "--config", PIX2PIX, "--work-dir", resumed, *GAN_FLOAT16,
                      "--resume", reference / "checkpoints/iter_4.pth")
    assert result.returncode == 0, result.stderr

    first, end, again = (torch.load(folder / f"checkpoints/iter_{i}.pth", weights_only=True)
                         for folder, i in ((reference, 4), (reference, 8), (resumed, 8)))
    scaler = end["optim"]["scaler"]
    assert scaler["scale"] > 0 and scaler == again["optim"]["scaler"]  # one scaler for G and D, resumed
    changed = [key for key, value in end["task"].items()
               if value.is_floating_point() and not torch.equal(value, first["task"][key])]
    assert any(key.startswith("generator.") for key in changed)  # G trained after the resume point
    assert any(key.startswith("discriminator.") for key in changed)  # and D
    for key, value in end["task"].items():
        torch.testing.assert_close(again["task"][key], value, atol=0, rtol=0, msg=named(key))
    for (where, a), (_, b) in zip(tensors(end["optim"]), tensors(again["optim"]), strict=True):
        torch.testing.assert_close(b, a, atol=0, rtol=0, msg=named(where))
    reference_metrics = (reference / "metrics.jsonl").read_text().splitlines()
    assert (resumed / "metrics.jsonl").read_text().splitlines() == reference_metrics[-1:]  # iteration 8's


def test_training_on_cuda_pins_batches_and_uses_workers():
    section = {"dataset": {"type": "SyntheticShapes", "num_samples": 8, "size": 32}, "batch_size": 4}
    loader = build_dataloader(section, "data.train", train=True, device=torch.device("cuda", 0))
    images = next(iter(loader))["image"]
    assert loader.num_workers >= 1 and loader.pin_memory and images.is_pinned()
    on_cpu = build_dataloader(section, "data.train", train=True, device=torch.device("cpu"))
    assert not on_cpu.pin_memory and not next(iter(on_cpu))["image"].is_pinned()


def test_device_cuda_means_the_gpu_of_the_local_rank(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert select_device("cuda") == torch.device("cuda", 0)
    assert select_device("auto") == torch.device("cuda", 0)


def test_two_cpu_ranks_on_a_machine_with_a_gpu_use_gloo(tmp_path):
    """`device: cpu` under torchrun where CUDA is present: NCCL would refuse the CPU tensors."""
    result = run_forked_ranks(2, "train", "--config", SEGMENTATION, "--work-dir", tmp_path / "run",
                              *TINY_SEGMENTATION, "train.max_iters=4", "train.val_interval=4",
                              folder=tmp_path / "out")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "device cpu  processes 2" in result.stdout


SHIPPED = sorted(path for path in [*REPO.glob("configs/segmentation/*.yaml"), *REPO.glob("projects/*/configs/*.yaml")]
                 if path.name != "unet_voc.yaml"  # the one that needs a VOC folder on disk
                 and not reads_published_data(to_plain(load_config(str(path)))))  # the recipes read their datasets
SHORT = ["train.max_iters=2", "train.val_interval=2", "train.ckpt_interval=2", "train.log_interval=1",
         "train.val_at_start=false"]
NO_DOWNLOAD = ["task.model.encoder_weights=null"]  # nothing is downloaded; random encoder weights
DECAY_AT_1 = ["optimizers.generators.scheduler.decay_start=1", "optimizers.discriminators.scheduler.decay_start=1"]
FITTING = {"deeplabv3plus_resnet50_shapes": NO_DOWNLOAD, "encoder_unet_mobilenet_v3_shapes": NO_DOWNLOAD,
           "encoder_unet_resnet34_shapes": NO_DOWNLOAD, "fpn_resnet50_shapes": NO_DOWNLOAD,
           "cyclegan_shapes": DECAY_AT_1, "cyclegan_shapes_toolkit": DECAY_AT_1}


@pytest.mark.parametrize("deterministic", ["false", "warn"])
@pytest.mark.parametrize("config", SHIPPED, ids=lambda path: path.stem)
def test_every_shipped_config_trains_on_the_gpu(tmp_path, config, deterministic):
    """Two iterations and an evaluation on CUDA with the config's own settings (amp auto: bf16),
    and with `deterministic: warn`. Not with `true`: on an H100 (torch 2.11) DeepLabV3, DeepLabV3+
    and the MobileNetV3 UNet failed with it (docs/checkpoints.md, "Exact on the GPU")."""
    result = run_tool("train", "--config", config, "--work-dir", tmp_path, "device=cuda", *SHORT,
                      *FITTING.get(config.stem, []), f"deterministic={deterministic}", cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "checkpoints/iter_2.pth").is_file()


def test_the_gpus_defaults_by_rule_and_in_the_log(tmp_path):
    """What the faked-device tests (tests/test_device_defaults.py, test_precision.py,
    test_memory_format.py) decide, on the real GPU: bf16 from compute capability 8.0 (not
    torch's emulated answer), NHWC from 7.0, workers, pinned memory, cuDNN's search; all logged."""
    from framework.runtime.precision import autocast_dtype, use_channels_last

    gpu = torch.device("cuda", 0)
    major = torch.cuda.get_device_capability(gpu)[0]
    assert autocast_dtype({"enabled": "auto", "dtype": None}, gpu) == (torch.bfloat16 if major >= 8 else None)
    assert use_channels_last("auto", gpu) is (major >= 7)
    result = run_tool("train", "--config", SEGMENTATION, "--work-dir", tmp_path, *ON_THE_GPU, "train.max_iters=2",
                      "train.val_interval=0", "data.train.num_workers=auto", "channels_last=auto")
    assert result.returncode == 0, result.stderr
    log = (tmp_path / "train.log").read_text()
    assert "(num_workers: auto), pinned memory (pin_memory: auto), persistent workers, decoded samples cached\n" in log
    assert "cudnn.benchmark on\n" in log
    assert f"memory format {'channels_last' if major >= 7 else 'contiguous (NCHW)'} (channels_last: auto)" in log
