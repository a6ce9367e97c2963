"""The benchmarks' plain scripts train the same networks as the framework, written apart: equal
parameter counts, output shapes, FLOPs (torch.utils.flop_counter) and layer kinds. Equal
parameters alone are not enough: a PatchGAN with one stride changed has the same parameters and
half the FLOPs. The semantic-synthesis script (both variants) also trains with its config's
optimizers, batch, EMA decay and loss weights. And the plain scripts import nothing of the
framework's, and train in float32 or, with --bf16, under bfloat16 autocast."""

import ast
import importlib.util
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.helpers.folder_data import make_aligned_pairs, make_voc
from benchmarks.release.in_process import BATCH
from framework.config import load_config, to_plain
from framework.registry import MODELS
from framework.runtime.precision import cpu_has_native_bf16
from support import REPO

PLAIN = REPO / "benchmarks" / "plain"
SYNTHESIS = {"oasis": "configs/synthesis/oasis_textures.yaml", "spade": "configs/synthesis/spade_textures.yaml"}


def plain_networks():
    spec = importlib.util.spec_from_file_location("plain_networks", PLAIN / "networks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def plain_synthesis(monkeypatch):
    """benchmarks/plain/synthesis.py as it runs: its sibling modules importable by their names."""
    monkeypatch.syspath_prepend(str(PLAIN))
    spec = importlib.util.spec_from_file_location("plain_synthesis", PLAIN / "synthesis.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def task_node(config: str) -> dict:
    return to_plain(load_config(REPO / config))


def framework_network(config: str, key: str) -> nn.Module:
    cfg = load_config(REPO / config)
    node = to_plain(cfg)["task"][key]
    for name in cfg.get("custom_imports", []):
        importlib.import_module(name)
    return MODELS.build(node, path=f"task.{key}")


def output_shapes(output) -> list[tuple]:
    """Every tensor's shape, in order: a multi-scale D's logits and features too."""
    if isinstance(output, torch.Tensor):
        return [tuple(output.shape)]
    return [shape for part in output for shape in output_shapes(part)]


def profile(network: nn.Module, *inputs: torch.Tensor) -> dict:
    kinds = (nn.Conv2d, nn.ConvTranspose2d, nn.BatchNorm2d, nn.InstanceNorm2d, nn.ReLU, nn.LeakyReLU, nn.Tanh,
             nn.MaxPool2d, nn.AvgPool2d)
    with torch.no_grad(), FlopCounterMode(display=False) as flops:
        output = network(*inputs)
    return {
        "parameters": sum(p.numel() for p in network.parameters()),
        "output": output_shapes(output),
        "flops": flops.get_total_flops(),
        "layers": Counter(type(m).__name__ for m in network.modules() if isinstance(m, kinds)),
    }


CASES = {
    "segmentation UNet": ("configs/segmentation/unet_shapes.yaml", "model", lambda p: p.SegUNet(3, 4, 16, 3), 3),
    "pix2pix generator": ("projects/pix2pix/configs/pix2pix_shapes.yaml", "generator",
                          lambda p: p.SkipBlockGenerator(3, 3, 16, 6), 3),
    "pix2pix discriminator": ("projects/pix2pix/configs/pix2pix_shapes.yaml", "discriminator",
                              lambda p: p.PatchDiscriminator(6, 16, 3), 6),
}


@pytest.mark.parametrize("case", CASES)
def test_plain_network_equals_the_framework_network(case):
    config, key, build_plain, channels = CASES[case]
    inputs = torch.rand(2, channels, 64, 64)
    ours, theirs = profile(framework_network(config, key), inputs), profile(build_plain(plain_networks()), inputs)
    assert ours == theirs


@pytest.mark.parametrize("variant", SYNTHESIS)
def test_plain_synthesis_networks_equal_the_framework_networks(variant, monkeypatch):
    # inputs of the config's sizes: a change there (classes, noise, image size) reaches both sides
    task = task_node(SYNTHESIS[variant])["task"]
    generator, discriminator = plain_synthesis(monkeypatch).networks(variant)
    classes, size = task["generator"]["num_classes"], task["generator"]["image_size"]
    labels = torch.randint(0, classes, (2, size, size))
    one_hot = torch.nn.functional.one_hot(labels, classes).permute(0, 3, 1, 2).float()
    noise = torch.randn(2, task["generator"]["noise_dim"])
    assert profile(framework_network(SYNTHESIS[variant], "generator"), one_hot, noise) == \
        profile(generator, one_hot, noise)
    seen = torch.rand(2, task["discriminator"]["in_channels"], size, size)
    assert profile(framework_network(SYNTHESIS[variant], "discriminator"), seen) == profile(discriminator, seen)


@pytest.mark.parametrize("variant", SYNTHESIS)
def test_plain_synthesis_trains_with_the_configs_settings(variant, monkeypatch):
    cfg, script = task_node(SYNTHESIS[variant]), plain_synthesis(monkeypatch)
    task, optimizers = cfg["task"], cfg["optimizers"]
    assert script.OPTIMIZERS[variant] == {"lr_g": optimizers["generator"]["lr"],
                                          "lr_d": optimizers["discriminator"]["lr"],
                                          "betas": tuple(optimizers["generator"]["betas"])}
    assert tuple(optimizers["discriminator"]["betas"]) == script.OPTIMIZERS[variant]["betas"]
    assert BATCH[variant] == cfg["data"]["train"]["batch_size"] and script.EMA_DECAY == task["ema_decay"]
    assert script.CLASSES == task["num_classes"] and script.NOISE_DIM[variant] == task["generator"]["noise_dim"]
    assert script.MODE_SEEKING_WEIGHT[variant] == task.get("mode_seeking_weight", 0.0)
    assert cfg["data"]["train"]["dataset"].get("pipeline", []) == []  # the plain script flips nothing
    if variant == "oasis":
        # OASIS's loss with its defaults (no don't-care class: every class supervised), as the plain script
        assert task["gan_loss"] == "oasis" and script.LABELMIX_WEIGHT == task["labelmix_weight"]
    else:
        assert task["gan_loss"] == "hinge" and script.FEATURE_MATCHING_WEIGHT == task["feature_matching"]["weight"]
        assert task.get("perceptual") is None  # the plain script has no perceptual term


def test_a_changed_stride_is_seen_though_parameters_are_equal():
    plain = plain_networks()
    network = plain.PatchDiscriminator(6, 16, 3)
    reference = profile(network, torch.rand(2, 6, 64, 64))
    network.model[2].stride = (1, 1)  # the second conv: stride 2 -> 1, same weights
    changed = profile(network, torch.rand(2, 6, 64, 64))
    assert changed["parameters"] == reference["parameters"] and changed["flops"] != reference["flops"]


@pytest.mark.parametrize("script", sorted(PLAIN.glob("*.py")), ids=lambda p: p.name)
def test_plain_scripts_import_nothing_of_the_framework(script):
    for node in ast.walk(ast.parse(script.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        assert not any(n.split(".")[0] in ("framework", "projects") for n in names), f"{script.name}: {names}"


PLAIN_RUNS = [("segmentation", None), ("pix2pix", None), ("synthesis", "oasis"), ("synthesis", "spade")]
# Without AMX-BF16 or AVX512-BF16 oneDNN emulates bf16 (x8.5-9.4 a step, docs/performance.md): three
# synthesis iterations of batch 4 did not end within 300 s on an AVX2-only EPYC, so --bf16 runs where it is native.
NATIVE_BF16 = pytest.mark.skipif(not cpu_has_native_bf16(), reason="this CPU emulates bfloat16 (no AMX-BF16 or "
                                 "AVX512-BF16, or ONEDNN_MAX_CPU_ISA caps below them): --bf16 runs where it is native")


def plain_data(script: str, tmp_path) -> Path:
    """A folder of 8 samples the plain script reads."""
    return {"segmentation": lambda: make_voc(tmp_path / "data", 8),
            "pix2pix": lambda: make_aligned_pairs(tmp_path / "data", 8),
            "synthesis": lambda: make_voc(tmp_path / "data", 8, scenes="textures")}[script]()


def train_plain(script: str, variant: str | None, root, tmp_path, *flags) -> dict:
    """benchmarks/plain/<script>.py trained 3 iterations on `root`: its weights."""
    options = ["--variant", variant] if variant else []
    out = tmp_path / f"{script}{''.join(flags)}.pth"
    result = subprocess.run([sys.executable, PLAIN / f"{script}.py", root, *options, "--iters", "3", "--batch", "4",
                             "--window", "1", "--out", out, *flags], cwd=PLAIN, capture_output=True, text=True,
                            timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout.splitlines()[-1])["window_times"]) == 3
    state = torch.load(out, weights_only=True)
    return state if script == "segmentation" else {f"{net}.{k}": v for net, d in state.items() for k, v in d.items()}


@pytest.fixture(scope="module")
def float32_runs(tmp_path_factory):
    """script, variant -> (its data folder, its float32 weights), each trained once for both tests below."""
    runs = {}

    def get(script: str, variant: str | None):
        if (script, variant) not in runs:
            folder = tmp_path_factory.mktemp(f"{script}_{variant}")
            root = plain_data(script, folder)
            runs[script, variant] = root, train_plain(script, variant, root, folder)
        return runs[script, variant]
    return get


@pytest.mark.parametrize("script, variant", PLAIN_RUNS)
def test_plain_scripts_train_in_float32(script, variant, float32_runs):
    _, state = float32_runs(script, variant)
    assert all(v.dtype != torch.bfloat16 and torch.isfinite(v).all() for v in state.values())


@NATIVE_BF16
@pytest.mark.parametrize("script, variant", PLAIN_RUNS)
def test_plain_scripts_train_under_bf16_autocast(script, variant, float32_runs, tmp_path):
    root, float32 = float32_runs(script, variant)
    bf16 = train_plain(script, variant, root, tmp_path, "--bf16")
    assert all(v.dtype != torch.bfloat16 and torch.isfinite(v).all() for v in bf16.values())  # float32 weights
    assert any(not torch.equal(float32[k], bf16[k]) for k in float32)  # bf16 rounding changed the training


@pytest.mark.parametrize("case", ["segmentation", "pix2pix", "oasis", "spade"])
def test_in_process_benchmark_trains_both_loops_alike(case):
    # benchmarks/release/in_process.py drives the plain script's loop and the framework's Trainer block by
    # block; each must really train every block's iterations, or its time per iteration is not one.
    result = subprocess.run([sys.executable, REPO / "benchmarks/release/in_process.py", "--case", case, "--block", "1",
                             "--rounds", "2", "--images", "16"], cwd=REPO, capture_output=True, text=True,
                            timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout.splitlines()[-1])
    assert figures["iterations"] == {"plain": 3, "framework": 3}  # warm-up block + 2 rounds of 1
    assert figures["precision"] == {"plain": "float32", "framework": "float32"} and figures["plain_ms"] > 0 and figures["framework_ms"] > 0
    assert figures["ratio_min"] <= figures["ratio_median"] <= figures["ratio_max"]
