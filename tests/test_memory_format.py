"""`channels_last: auto`: NHWC where it was measured faster (AVX-512 CPUs, CUDA with tensor cores),
NCHW elsewhere (the CPU faked through its flags and the oneDNN ISA cap, a GPU through its compute
capability)."""

import pytest
import torch

from framework.config import load_config
from framework.runtime.precision import describe_memory_format, use_channels_last
from support import REPO, TINY_SEGMENTATION, call_tool

CPU = torch.device("cpu")
AVX512 = {"avx2", "avx512f", "avx512bw"}
AVX2_ONLY = {"avx2", "fma"}


@pytest.mark.parametrize("flags, environ, expected", [
    (AVX512, {}, True),
    (AVX2_ONLY, {}, False),
    (set(), {}, False),  # no /proc/cpuinfo (macOS) or an unknown CPU: the default format
    (AVX512, {"ONEDNN_MAX_CPU_ISA": "AVX2"}, False),  # the AVX2 benchmark column
    (AVX512, {"ONEDNN_MAX_CPU_ISA": "avx2_vnni"}, False),
    (AVX512, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}, True),
])
def test_auto_picks_channels_last_only_on_avx512_cpus(flags, environ, expected):
    assert use_channels_last("auto", CPU, flags, environ) is expected


@pytest.mark.parametrize("capability, expected", [
    ((6, 1), False), ((6, 9), False),  # Pascal: no tensor cores, cuDNN's NHWC kernels are no faster
    ((7, 0), True), ((7, 5), True), ((8, 0), True), ((9, 0), True),  # tensor cores from Volta (7.0) on
])
def test_auto_picks_channels_last_on_gpus_with_tensor_cores(monkeypatch, capability, expected):
    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: asked.append(device) or capability)
    gpu = torch.device("cuda", 1)
    assert use_channels_last("auto", gpu, AVX2_ONLY, {}) is expected  # the CPU's flags do not count
    assert asked == [gpu]  # the run's own GPU, not the current one
    assert use_channels_last(not expected, gpu, AVX512, {}) is (not expected)  # explicit settings kept


@pytest.mark.parametrize("setting", [True, False])
def test_explicit_settings_are_kept_whatever_the_cpu(setting):
    for flags in (AVX512, AVX2_ONLY):
        assert use_channels_last(setting, CPU, flags, {}) is setting


def test_channels_last_accepts_auto_and_nothing_else():
    config = REPO / "configs/segmentation/unet_shapes.yaml"
    assert load_config(config, ["channels_last=auto"]).channels_last == "auto"
    with pytest.raises(Exception, match="channels_last"):
        load_config(config, ["channels_last=sometimes"])


def test_the_log_line_names_the_format():
    assert describe_memory_format(True) == "memory format channels_last (channels_last: auto)"
    assert describe_memory_format(False) == "memory format contiguous (NCHW) (channels_last: auto)"


def test_a_run_with_auto_logs_the_format_and_trains_in_it(tmp_path):
    result = call_tool("train", "--config", REPO / "configs/segmentation/unet_shapes.yaml", "--work-dir", tmp_path,
                       *TINY_SEGMENTATION, "train.max_iters=2", "train.val_interval=0", "train.ckpt_interval=2",
                       "channels_last=auto")
    assert result.returncode == 0, result.stderr
    nhwc = use_channels_last("auto", CPU)
    assert describe_memory_format(nhwc) in (tmp_path / "train.log").read_text()
    weights = torch.load(tmp_path / "checkpoints/iter_2.pth", weights_only=True)["task"]
    kernels = [w for w in weights.values() if w.dim() == 4 and w.shape[1] > 1 and w.shape[2] > 1]
    assert kernels and all(w.is_contiguous(memory_format=torch.channels_last) is nhwc for w in kernels)
    assert all(w.is_contiguous() is not nhwc for w in kernels)
