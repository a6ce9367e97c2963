"""How far float32 is from float64 in the synthesis generators' gradient, in NCHW and in NHWC
(`channels_last`), issue 53. A measurement, not a test (tests/test_memory_format.py checks that one
training step agrees in both formats).

    python benchmarks/studies/channels_last_rounding.py [--configs configs/synthesis/oasis_textures.yaml ...] [--compile]

Per config: its generator as configured (seed 0), a batch of 2 random label maps and noise, and the
gradient of a random linear function of the output (so no loss of our own shapes it), in
float64 (the reference) and in float32 per memory format, over --draws draws of the three;
printed is |g32 - g64| / |g64| over all parameters (median, min..max), with BatchNorm in
training mode (batch statistics: what training runs) and in eval mode (running statistics), and in
how many draws a LeakyReLU input lies on the other side of zero than in float64. Such a flip of
one element moves that layer's gradient by about 1e-3 of its size; at the kink either branch is a
valid subgradient, so this is rounding, not a wrong result. Then one BatchNorm2d alone, forward and backward, on inputs of mean 5 and
standard deviation 3, against float64. `--compile` adds the NCHW generator compiled in place as
`compile: true` does (inductor runs its convolutions channels-last unless its layout_optimization
is off, TORCHINDUCTOR_LAYOUT_OPTIMIZATION=0), without the LeakyReLU
count: hooks inside a compiled network would cut its graph.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import framework  # noqa: E402,F401  (fills the registries)
from framework.config import load_config  # noqa: E402
from framework.registry import TASKS  # noqa: E402

TABLE_HEAD = "| case | NCHW: median (min..max) | NHWC |\n| --- | --- | --- |"
FORMATS = {"NCHW": torch.contiguous_format, "NHWC": torch.channels_last}


def relative_error(value: torch.Tensor, reference: torch.Tensor) -> float:
    return float((value.double() - reference).norm() / reference.norm())


def prepared(generator, memory_format, dtype, batch_statistics: bool, compiled: bool = False):
    """A copy of the generator in that dtype and memory format, in training mode, its BatchNorm on
    batch or running statistics; `compiled`: compiled in place as `compile: true` does."""
    network = copy.deepcopy(generator).to(dtype).to(memory_format=memory_format).train()
    for module in network.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and not batch_statistics:
            module.eval()
    if compiled:
        network.compile()
    return network


def generator_gradient(network, generator, inputs: tuple, weights: torch.Tensor, memory_format, dtype,
                       signs_too: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The gradient over all parameters, and the signs of every LeakyReLU's input (the outputs of
    the residual blocks' norm_0 and norm_1 SPADE layers). A compiled network is asked for no signs:
    hooks inside it would cut its graph, and so change what it computes. The network's state is
    the generator's again first: spectral norm's power iteration moves its vectors at every forward."""
    network.load_state_dict(generator.state_dict())
    for parameter in network.parameters():
        parameter.grad = None
    signs, hooks = [], []
    for name, module in network.named_modules():
        if signs_too and name.endswith(("norm_0", "norm_1")):
            hooks.append(module.register_forward_hook(
                lambda module, args, output: signs.append((output > 0).flatten())))
    inputs = [x.to(dtype).contiguous(memory_format=memory_format) if x.dim() == 4 else x.to(dtype) for x in inputs]
    (network(*inputs) * weights.to(dtype)).sum().backward()
    for hook in hooks:
        hook.remove()
    gradient = torch.cat([p.grad.double().flatten() for p in network.parameters()])
    return gradient, torch.cat(signs) if signs_too else None


def generator_rows(config: str, draws: int, compiled: bool) -> None:
    cfg = load_config(REPO / config)
    torch.manual_seed(0)
    task = TASKS.build(OmegaConf.to_container(cfg.task), path="task")
    classes, size = cfg.task.num_classes, cfg.data.train.dataset.size
    variants = {name: (memory_format, False) for name, memory_format in FORMATS.items()}
    if compiled:
        variants["NCHW compiled"] = (torch.contiguous_format, True)
    errors = {(batch_statistics, name): [] for batch_statistics in (True, False) for name in variants}
    for batch_statistics in (True, False):
        reference_network = prepared(task.generator, torch.contiguous_format, torch.float64, batch_statistics)
        networks = {name: prepared(task.generator, memory_format, torch.float32, batch_statistics, compile_it)
                    for name, (memory_format, compile_it) in variants.items()}
        for seed in range(draws):
            draw = torch.Generator().manual_seed(seed)
            labels = torch.randint(0, classes, (2, size, size), generator=draw)
            inputs = (F.one_hot(labels, classes).permute(0, 3, 1, 2).double(),)
            if task.noise_shape is not None:
                inputs += (torch.randn(2, *task.noise_shape, generator=draw, dtype=torch.float64),)
            weights = torch.randn(2, 3, size, size, generator=draw, dtype=torch.float64)
            reference, reference_signs = generator_gradient(reference_network, task.generator, inputs, weights,
                                                            torch.contiguous_format, torch.float64)
            for name, (memory_format, compile_it) in variants.items():
                gradient, signs = generator_gradient(networks[name], task.generator, inputs, weights, memory_format, torch.float32,
                                                     signs_too=not compile_it)
                flips = None if signs is None else int((signs != reference_signs).sum())
                errors[batch_statistics, name].append((relative_error(gradient, reference), flips))
    print(f"\n{Path(config).stem} generator ({len(reference_signs)} LeakyReLU inputs), {draws} draws:")
    print("| case | " + " | ".join(variants) + " |\n|" + " --- |" * (len(variants) + 1))
    for batch_statistics in (True, False):
        mode = "batch statistics" if batch_statistics else "running statistics"
        cells = []
        for name in variants:
            found = [error for error, _ in errors[batch_statistics, name]]
            cell = f"{statistics.median(found):.1e} ({min(found):.1e}..{max(found):.1e})"
            if not variants[name][1]:
                flipped = sum(flips > 0 for _, flips in errors[batch_statistics, name])
                cell += f"; {flipped} of {draws} draws flip a LeakyReLU"
            cells.append(cell)
        print(f"| generator, BatchNorm on {mode} | " + " | ".join(cells) + " |")
        print("  per draw, error (flips):", {name: [f"{error:.0e} ({flips})" for error, flips in errors[batch_statistics, name]]
                                             for name in variants})


def batchnorm_rows(channels: int = 64, size: int = 64) -> None:
    draw = torch.Generator().manual_seed(1)
    x = torch.randn(2, channels, size, size, generator=draw, dtype=torch.float64) * 3 + 5
    upstream = torch.randn(2, channels, size, size, generator=draw, dtype=torch.float64) + 2

    def run(memory_format, dtype):
        inputs = x.to(dtype).contiguous(memory_format=memory_format).detach().requires_grad_(True)
        out = F.batch_norm(inputs, None, None, training=True)
        out.backward(upstream.to(dtype).contiguous(memory_format=memory_format))
        return out.detach(), inputs.grad

    print("\nBatchNorm2d alone, batch statistics:")
    print(TABLE_HEAD)
    reference = run(torch.contiguous_format, torch.float64)
    errors = {name: run(memory_format, torch.float32) for name, memory_format in FORMATS.items()}
    for what, index in (("forward", 0), ("backward", 1)):
        print(f"| BatchNorm2d alone, 2x{channels}x{size}x{size}, {what} | "
              f"{relative_error(errors['NCHW'][index], reference[index]):.1e} | "
              f"{relative_error(errors['NHWC'][index], reference[index]):.1e} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=["configs/synthesis/oasis_textures.yaml"],
                        help="the SPADE-style config has the same generator")
    parser.add_argument("--draws", type=int, default=8, help="label maps, noise and output weights drawn")
    parser.add_argument("--compile", action="store_true",
                        help="also the NCHW generator compiled as `compile: true` does (needs a C++ compiler)")
    args = parser.parse_args()
    print(f"float32 against float64, |g32 - g64| / |g64| ({torch.get_num_threads()} threads, "
          f"ATen CPU capability {torch.backends.cpu.get_cpu_capability()})")
    for config in args.configs:
        generator_rows(config, args.draws, args.compile)
    batchnorm_rows()


if __name__ == "__main__":
    main()
