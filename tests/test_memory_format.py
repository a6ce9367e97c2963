"""`channels_last: auto`: NHWC where it was measured faster (AVX-512 CPUs, CUDA with tensor cores),
NCHW elsewhere (the CPU faked through its flags and the oneDNN ISA cap, a GPU through its compute
capability)."""

import copy

import pytest
import torch
from omegaconf import OmegaConf

import framework  # noqa: F401  (fills the registries)
from framework.config import load_config
from framework.registry import TASKS
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


def one_step_in(task, memory_format: torch.memory_format, batch) -> tuple[dict, dict]:
    """One training iteration of `task` (a copy) in `memory_format` with plain SGD (a weight's change
    is its gradient, so Adam's near-sign first step does not blow up rounding): the logged losses
    and each network's change, flattened."""
    from framework.optim.optimizers import build_optimizers

    task = copy.deepcopy(task).to(memory_format=memory_format)
    names = list(task.networks())
    optimizers = build_optimizers({"optimizers": {name: {"type": "SGD", "lr": 0.01, "params": name} for name in names}},
                                  task, max_iters=1)
    before = {name: torch.cat([p.detach().flatten().clone() for p in task.networks()[name].parameters()]) for name in names}
    torch.manual_seed(0)  # the task's own draws (noise, LabelMix's masks) alike
    logs = task.train_iteration([batch], optimizers)
    change = {name: torch.cat([p.detach().flatten() for p in task.networks()[name].parameters()]) - before[name]
              for name in names}
    return logs, change


@pytest.mark.parametrize("config", ["configs/synthesis/oasis_textures.yaml", "configs/synthesis/spade_textures.yaml"])
def test_channels_last_computes_the_synthesis_configs_step_in_float32_alike(config):
    """Issue 53: NHWC is the same computation in another memory order. One step of each shipped
    synthesis task, as configured, from the same weights, data and draws: the losses agree to 1e-5
    and each network's change to 2e-2 of its size. What parts them is float32 rounding: the
    generator's change parts by 1.7e-4 (OASIS-style) and 2.2e-3 (SPADE-style) at one thread, where
    a LeakyReLU input within rounding of zero takes the other branch in one format (one element of
    1.4 million moves its layer's gradient by ~1e-3; benchmarks/studies/channels_last_rounding.py). Without
    such a flip the generator's gradient is 1e-6 from float64's in either format. A
    layout-dependent op (a `view` of memory, noise drawn `randn_like` an NHWC tensor) or other
    draws part them by the whole change."""
    cfg = load_config(REPO / config)
    torch.manual_seed(0)
    task = TASKS.build(OmegaConf.to_container(cfg.task), path="task")
    classes, size = cfg.task.num_classes, cfg.data.train.dataset.size
    draw = torch.Generator().manual_seed(1)
    batch = {"image": torch.randint(0, 256, (2, 3, size, size), dtype=torch.uint8, generator=draw),
             "mask": torch.randint(0, classes, (2, size, size), generator=draw).to(torch.uint8),
             "index": torch.tensor([0, 1]), "name": ["a", "b"]}
    logs_nchw, change_nchw = one_step_in(task, torch.contiguous_format, batch)
    logs_nhwc, change_nhwc = one_step_in(task, torch.channels_last, batch)
    assert logs_nchw.keys() == logs_nhwc.keys()
    for name, value in logs_nchw.items():
        torch.testing.assert_close(torch.as_tensor(logs_nhwc[name]), torch.as_tensor(value), rtol=1e-5, atol=1e-6,
                                   msg=f"{config}: {name}")
    for name, change in change_nchw.items():
        parted = (change_nhwc[name] - change).norm() / change.norm()
        assert change.norm() > 0 and parted < 2e-2, f"{config}: {name}'s change parted by {parted:.2e} of its size"
