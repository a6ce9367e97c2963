"""`amp.enabled: auto`: bfloat16 autocast where the hardware has it, float32 elsewhere (the CPU's
capability faked through its flags and the oneDNN ISA cap, a GPU's through torch.cuda)."""

import pytest
import torch

from framework.config import load_config
from framework.errors import ConfigError
from framework.runtime.precision import autocast_dtype, cpu_flags, describe, emulated_bf16_warning, native_bf16
from support import REPO, TINY_SEGMENTATION, call_tool

CPU = torch.device("cpu")
SAPPHIRE_RAPIDS = {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}
ZEN4 = {"avx2", "avx512f", "avx512_bf16"}
CASCADE_LAKE = {"avx2", "avx512f", "avx512bw", "avx512vl", "avx512_vnni"}  # AVX-512 without any bf16 instruction
AVX2_ONLY = {"avx2", "fma"}
AUTO, OFF = {"enabled": "auto", "dtype": None}, {"enabled": False, "dtype": None}
GPU = torch.device("cuda", 0)


@pytest.mark.parametrize("flags, environ, expected", [
    (SAPPHIRE_RAPIDS, {}, torch.bfloat16),
    (ZEN4, {}, torch.bfloat16),
    (CASCADE_LAKE, {}, None),  # AVX-512 alone is not bf16: oneDNN would emulate it, slower than float32
    (AVX2_ONLY, {}, None),
    (set(), {}, None),  # no /proc/cpuinfo (macOS) or an unknown CPU: float32
    (SAPPHIRE_RAPIDS, {"ONEDNN_MAX_CPU_ISA": "AVX2"}, None),  # the AVX2 benchmark column
    (SAPPHIRE_RAPIDS, {"ONEDNN_MAX_CPU_ISA": "avx512_core"}, None),
    (SAPPHIRE_RAPIDS, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"}, torch.bfloat16),
])
def test_auto_picks_bf16_only_where_the_cpu_has_it(flags, environ, expected):
    assert autocast_dtype(AUTO, CPU, flags, environ) == expected


def test_explicit_settings_are_kept_whatever_the_cpu():
    assert autocast_dtype({"enabled": True, "dtype": "float16"}, CPU, AVX2_ONLY, {}) == torch.float16
    assert autocast_dtype({"enabled": True, "dtype": None}, CPU, SAPPHIRE_RAPIDS, {}) == torch.float16  # unset
    assert autocast_dtype({"enabled": True, "dtype": "bfloat16"}, CPU, AVX2_ONLY, {}) == torch.bfloat16
    assert autocast_dtype(OFF, CPU, SAPPHIRE_RAPIDS, {}) is None


def test_cpu_flags_are_read_from_cpuinfo_text():
    text = "processor\t: 0\nmodel name\t: X\nflags\t\t: fpu avx2 avx512_bf16\nbugs\t\t: none\n"
    assert cpu_flags(text) == {"fpu", "avx2", "avx512_bf16"}
    assert cpu_flags("processor : 0\n") == set()


def test_amp_enabled_accepts_auto_and_nothing_else():
    config = REPO / "configs/segmentation/unet_shapes.yaml"
    assert load_config(config, ["amp.enabled=auto"]).amp.enabled == "auto"
    with pytest.raises(Exception, match="amp.enabled"):
        load_config(config, ["amp.enabled=sometimes"])


def test_a_run_logs_the_precision_it_chose(tmp_path):
    result = call_tool("train", "--config", REPO / "configs/segmentation/unet_shapes.yaml", "--work-dir", tmp_path,
                       *TINY_SEGMENTATION, "train.max_iters=2", "train.val_interval=0", "amp.enabled=auto")
    assert result.returncode == 0, result.stderr
    chosen = "bfloat16" if native_bf16(CPU) else "float32"
    log = (tmp_path / "train.log").read_text()
    assert f"precision {chosen} (amp.enabled: auto)" in log
    assert "data.train: 0 worker processes, memory not pinned (pin_memory: auto), decoded samples cached as the first epoch reads them" in log
    assert "cudnn.benchmark" not in log  # named on CUDA only
    assert describe(OFF, CPU, None).startswith("precision float32")


@pytest.mark.parametrize("amp, dtype, flags, line", [
    (AUTO, torch.bfloat16, ZEN4, "precision bfloat16 (amp.enabled: auto)"),
    (AUTO, None, AVX2_ONLY, "precision float32 (amp.enabled: auto)"),
    (OFF, None, AVX2_ONLY, "precision float32"),
    (OFF, None, ZEN4, "precision float32; this device computes bfloat16 natively: amp.enabled=auto (bf16 autocast) "
                      "usually trains faster (docs/performance.md)"),
    ({"enabled": True, "dtype": "float16"}, torch.float16, ZEN4, "precision float16"),
    ({"enabled": True, "dtype": "bfloat16"}, torch.bfloat16, AVX2_ONLY, "precision bfloat16"),
], ids=["auto_bf16", "auto_float32", "off", "off_on_a_bf16_cpu", "float16", "bfloat16"])
def test_the_precision_line_and_the_hint_only_where_amp_is_off_on_a_bf16_cpu(monkeypatch, amp, dtype, flags, line):
    # issue 25: where bf16 is not the choice on a CPU that has it, one line says what it would gain
    import framework.runtime.precision as precision

    monkeypatch.setattr(precision, "cpu_flags", lambda cpuinfo=None: flags)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    assert describe(amp, CPU, dtype) == line


@pytest.mark.parametrize("dtype, flags, environ, warned", [
    (torch.bfloat16, AVX2_ONLY, {}, True),
    (torch.bfloat16, CASCADE_LAKE, {}, True),  # AVX-512 without bf16 instructions emulates it too
    (torch.bfloat16, ZEN4, {"ONEDNN_MAX_CPU_ISA": "AVX2"}, True),  # capped below them
    (torch.bfloat16, ZEN4, {}, False),
    (torch.bfloat16, SAPPHIRE_RAPIDS, {}, False),
    (torch.float16, AVX2_ONLY, {}, False),
    (None, AVX2_ONLY, {}, False),
])
def test_bf16_asked_for_on_a_cpu_that_emulates_it_is_warned_of(dtype, flags, environ, warned):
    line = emulated_bf16_warning(CPU, dtype, flags, environ)
    assert (line is not None) is warned
    if warned:
        assert "emulated" in line and "slower than in float32" in line and "x" in line.split("measured")[1]
    assert emulated_bf16_warning(GPU, dtype, flags, environ) is None  # a GPU's bf16 is not the CPU's


def test_a_run_in_bf16_on_an_emulating_cpu_logs_one_warning(tmp_path, monkeypatch):
    # nothing-silent part 4, item 0: the ISA cap read at build time stands for an AVX2-only CPU
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    result = call_tool("train", "--config", REPO / "configs/segmentation/unet_shapes.yaml", "--work-dir", tmp_path,
                       *TINY_SEGMENTATION, "train.max_iters=1", "train.val_interval=0", "amp.enabled=true",
                       "amp.dtype=bfloat16")
    assert result.returncode == 0, result.stderr
    log = (tmp_path / "train.log").read_text()
    assert log.count("bfloat16 autocast on this CPU is emulated") == 1
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    quiet = call_tool("train", "--config", REPO / "configs/segmentation/unet_shapes.yaml", "--work-dir",
                      tmp_path / "float32", *TINY_SEGMENTATION, "train.max_iters=1", "train.val_interval=0",
                      "amp.enabled=false")
    assert quiet.returncode == 0 and "emulated" not in (tmp_path / "float32/train.log").read_text()


def test_cpu_flags_are_this_machines_flags_line():
    cpuinfo = pytest.importorskip("pathlib").Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        pytest.skip("no /proc/cpuinfo here")
    flags_line = next(line for line in cpuinfo.read_text().splitlines() if line.startswith("flags"))
    assert cpu_flags() == set(flags_line.split(":", 1)[1].split()) and "fpu" in cpu_flags()


def fake_gpu(monkeypatch, capability):
    """A CUDA device of `capability` as torch.cuda answers for it: bf16 native from 8.0; below, only
    through emulation (what is_bf16_supported() counts by default)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported",
                        lambda including_emulation=True: capability[0] >= 8 or including_emulation)


@pytest.mark.parametrize("capability, expected", [
    ((9, 0), torch.bfloat16), ((8, 0), torch.bfloat16),  # H100, A100
    ((7, 5), None), ((7, 0), None),  # T4, V100: bf16 only emulated, slower than float32
])
def test_auto_picks_bf16_on_gpus_that_compute_it_natively(monkeypatch, capability, expected):
    fake_gpu(monkeypatch, capability)
    assert autocast_dtype(AUTO, GPU, AVX2_ONLY, {}) == expected
    assert autocast_dtype(AUTO, CPU, AVX2_ONLY, {}) is None  # the GPU's answer is not the CPU's


def test_the_gpu_hint_where_amp_is_off_on_a_bf16_gpu(monkeypatch):
    fake_gpu(monkeypatch, (8, 0))
    assert "computes bfloat16 natively" in describe(OFF, GPU, None)
    fake_gpu(monkeypatch, (7, 5))
    assert describe(OFF, GPU, None) == "precision float32"


def test_float16_under_auto_is_refused_not_dropped(monkeypatch):
    """issue 42: `amp.dtype: float16` with `enabled: auto` trained in bf16 or float32 without a word."""
    message = "amp.dtype: float16 with amp.enabled: auto"
    config = REPO / "configs/segmentation/unet_shapes.yaml"
    with pytest.raises(ConfigError, match=message):
        load_config(config, ["amp.dtype=float16"])
    assert load_config(config, ["amp.dtype=float16", "amp.enabled=true"]).amp.dtype == "float16"
    assert load_config(config, ["amp.dtype=float16", "amp.enabled=false"]).amp.enabled is False
    fake_gpu(monkeypatch, (7, 0))  # where float16 would have been the only fast AMP
    with pytest.raises(ConfigError, match=message):
        autocast_dtype({"enabled": "auto", "dtype": "float16"}, GPU)
    # bfloat16 is what auto picks where it picks any: honoured, and float32 where the hardware lacks it
    assert autocast_dtype({"enabled": "auto", "dtype": "bfloat16"}, GPU) is None
    fake_gpu(monkeypatch, (8, 0))
    assert autocast_dtype({"enabled": "auto", "dtype": "bfloat16"}, GPU) == torch.bfloat16
