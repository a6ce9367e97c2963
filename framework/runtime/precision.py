"""Which autocast dtype a run trains in: `amp: {enabled: true | false | auto, dtype: ...}`; and,
at the end, which memory format its networks use (`channels_last: true | false | auto`).

`enabled: auto` picks bfloat16 where the hardware computes it natively and full precision
elsewhere:
- CUDA: bfloat16 when the device computes it natively (compute capability 8.0 and newer). Not
  torch.cuda.is_bf16_supported()'s default answer, which counts emulation: a V100 or T4 says yes
  and runs bf16 slower than float32.
- CPU: bfloat16 on CPUs with AMX-BF16 or AVX512-BF16 (Sapphire Rapids and newer Xeons, AMD Zen 4
  and newer), read from the CPU flags; on AVX2-only CPUs oneDNN emulates bf16 and a step is slower
  than in float32, so auto stays in float32 there. An `ONEDNN_MAX_CPU_ISA` below the bf16 ISAs
  (as the AVX2 benchmark columns set it) counts as no bf16.
bfloat16 needs no GradScaler (its range is float32's); float16 (`enabled: true`, with `dtype`
float16 or unset) gets one. `enabled: auto` chooses the dtype itself: `dtype: bfloat16` agrees
with it, `dtype: float16` is refused (config/loading.py and `autocast_dtype`), never dropped. Losses, metrics, GAN penalties and EMA are computed in float32 and checkpoints stay
float32 whatever the autocast dtype.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from framework.config.schema import AUTO_WITH_FLOAT16
from framework.errors import ConfigError

AUTOCAST_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
# oneDNN ISA caps (ONEDNN_MAX_CPU_ISA) under which it has no AVX-512 kernels, and no native bf16 instructions
ISAS_WITHOUT_AVX512 = {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2"}
ISAS_WITHOUT_BF16 = ISAS_WITHOUT_AVX512 | {"AVX512_CORE", "AVX512_CORE_VNNI"}


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (Linux); empty where that file is absent."""
    if cpuinfo is None:
        path = Path("/proc/cpuinfo")
        cpuinfo = path.read_text() if path.exists() else ""
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def cpu_has_native_bf16(flags: set[str] | None = None, environ=os.environ) -> bool:
    if environ.get("ONEDNN_MAX_CPU_ISA", "").upper() in ISAS_WITHOUT_BF16:
        return False
    return any(flag in (cpu_flags() if flags is None else flags) for flag in BF16_CPU_FLAGS)


def native_bf16(device: torch.device, flags: set[str] | None = None, environ=os.environ) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    return device.type == "cpu" and cpu_has_native_bf16(flags, environ)


def autocast_dtype(amp: dict, device: torch.device, flags: set[str] | None = None,
                   environ=os.environ) -> torch.dtype | None:
    """The autocast dtype for the `amp` section on `device`, or None for full precision."""
    if amp["enabled"] == "auto":
        if amp.get("dtype") == "float16":
            raise ConfigError(AUTO_WITH_FLOAT16)
        return torch.bfloat16 if native_bf16(device, flags, environ) else None
    return AUTOCAST_DTYPES[amp.get("dtype") or "float16"] if amp["enabled"] else None


def describe(amp: dict, device: torch.device, dtype: torch.dtype | None) -> str:
    """One line for the log: the precision chosen and, where `auto` would pick bf16 that a run
    with amp off forgoes, a hint."""
    chosen = "float32" if dtype is None else str(dtype).removeprefix("torch.")
    line = f"precision {chosen}" + (" (amp.enabled: auto)" if amp["enabled"] == "auto" else "")
    if dtype is None and amp["enabled"] is False and native_bf16(device):
        line += ("; this device computes bfloat16 natively: amp.enabled=auto (bf16 autocast) usually trains "
                 "faster (docs/performance.md)")
    return line


# Measured with oneDNN capped below its bf16 instructions (ONEDNN_MAX_CPU_ISA=AVX2, what an AVX2-only
# CPU runs): the pix2pix pair's step took 8.5-9.4x its float32 time (benchmarks/studies/onednn_breakdown.py,
# docs/performance.md).
EMULATED_BF16_SLOWDOWN = "8.5-9.4x"


def emulated_bf16_warning(device: torch.device, dtype: torch.dtype | None, flags: set[str] | None = None,
                          environ=os.environ) -> str | None:
    """One warning line where a run asked for bf16 autocast on a CPU that only emulates it (no
    AMX-BF16 or AVX512-BF16): it trains, far slower than in float32."""
    if dtype != torch.bfloat16 or device.type != "cpu" or cpu_has_native_bf16(flags, environ):
        return None
    return (f"bfloat16 autocast on this CPU is emulated (no AMX-BF16 or AVX512-BF16 instructions): a training step "
            f"measured {EMULATED_BF16_SLOWDOWN} slower than in float32 (docs/performance.md); amp.enabled=auto "
            f"picks float32 here")


# ----------------------------------------------------------------------------- memory format
# Which memory format a run's networks use: `channels_last: true | false | auto`.
#
# Whether NHWC (channels_last) is faster depends on the network and the CPU, so the default stays
# NCHW and a config says what was measured for its network. `auto` picks by the hardware:
# - CUDA: NHWC on devices with tensor cores (compute capability 7.0 and newer), whose cuDNN
#   convolutions are NHWC.
# - CPU: NHWC with AVX-512 (flag `avx512f`), NCHW otherwise. That is right for DCGAN's networks
#   (G+D step at batch 32 on 2 cores: 29.5 -> 24.4 ms with NHWC on an AVX-512 Xeon, 48.5 -> 53.4
#   and 55.2 -> 65.3 ms on an AVX2-only EPYC), so `dcgan_shapes.yaml` uses it. It is not a rule
#   for every network: the Quickstart UNet trains x1.25-1.6 faster in NHWC on AVX-512 and x1.3 on
#   the AVX2 EPYC, so its config says `true` (`benchmarks/studies/channels_last.py`,
#   `benchmarks/helpers/gan_networks.py`, docs/performance.md). The synthesis configs' networks follow the
#   rule: an iteration takes 20% (OASIS-style) and 16% (SPADE-style) less time in NHWC under
#   bfloat16 on AVX-512, and the same with AVX2 (`benchmarks/release/in_process.py ... channels_last=true`
#   against the plain NCHW script). An `ONEDNN_MAX_CPU_ISA` below AVX-512 (as
#   the AVX2 benchmark columns set it) counts as no AVX-512: oneDNN runs the convolutions.

def cpu_has_avx512(flags: set[str] | None = None, environ=os.environ) -> bool:
    if environ.get("ONEDNN_MAX_CPU_ISA", "").upper() in ISAS_WITHOUT_AVX512:
        return False
    return "avx512f" in (cpu_flags() if flags is None else flags)


def use_channels_last(setting: bool | str, device: torch.device, flags: set[str] | None = None,
                      environ=os.environ) -> bool:
    """Whether the networks go NHWC for `channels_last: setting` on `device`."""
    if setting != "auto":
        return bool(setting)
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device)[0] >= 7
    return device.type == "cpu" and cpu_has_avx512(flags, environ)


def describe_memory_format(chosen: bool) -> str:
    """The log line where `auto` chose."""
    return f"memory format {'channels_last' if chosen else 'contiguous (NCHW)'} (channels_last: auto)"
