"""Export a trained model to ONNX or TorchScript and check it against PyTorch:

    python tools/export.py --config CFG --checkpoint CKPT --format onnx|torchscript --output FILE
        [--dynamic] [--size H W] [--batch N] [--atol X] [--direction AtoB|BtoA] [key=value ...]

The exported model takes float32 RGB images with values 0..255 (N x 3 x H x W; segmentation:
normalisation inside, logits out; pix2pix: images in [0, 1] out) or, for an unconditional GAN,
noise (N x latent_dim x 1 x 1). With --dynamic the batch, height and width are free (ONNX
dynamic axes; TorchScript is traced, which keeps sizes free for the framework's networks).
A CycleGAN exports one generator, the (EMA) one of --direction AtoB or BtoA.

After writing the file, the exported model (onnxruntime for ONNX) and PyTorch run on the same
random batch, at the export size and, with --dynamic, a second size; the max absolute
difference is printed, and the exit status is 1 when it exceeds --atol (default 1e-4 for
ONNX, 1e-5 for TorchScript). ONNX needs the optional extra: pip install -e ".[export]".
"""

import argparse
import math
import sys
from pathlib import Path

from framework.engine.cli import run
from framework.engine.trained import load_trained_task
from framework.inference.export import FORMATS, deployable, example_inputs, export, max_difference, require_onnx
from framework.inference.generator import choose_direction

DEFAULT_ATOL = {"onnx": 1e-4, "torchscript": 1e-5}


def parse_args() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="the config the model was trained with")
    parser.add_argument("--checkpoint", help="training checkpoint (.pth); without it, the initial weights")
    parser.add_argument("--format", required=True, choices=FORMATS)
    parser.add_argument("--output", required=True, help="file to write (.onnx, .pt)")
    parser.add_argument("--dynamic", action="store_true", help="free batch size, height and width")
    parser.add_argument("--size", type=int, nargs=2, default=[256, 256], metavar=("H", "W"),
                        help="example input size (rounded up to the network's size divisor)")
    parser.add_argument("--batch", type=int, default=1, help="example batch size")
    parser.add_argument("--atol", type=float, help="largest accepted difference from PyTorch")
    parser.add_argument("--direction", choices=["AtoB", "BtoA"], help="CycleGAN: the generator to export")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    return parser


def check_sizes(size: list[int], batch: int, divisor: int, dynamic: bool) -> list[tuple[int, tuple[int, int]]]:
    """(batch, (H, W)) to compare at: the export size, and with --dynamic another one."""
    first = tuple(math.ceil(s / divisor) * divisor for s in size)
    sizes = [(batch, first)]
    if dynamic:
        step = max(divisor, 8)
        sizes.append((batch + 1, (first[0] + 2 * step, first[1] + step)))
    return sizes


def main(args: argparse.Namespace) -> int:
    if args.format == "onnx":
        require_onnx()  # refuse before any work when the extra is missing
    task, _ = load_trained_task(args.config, args.checkpoint, args.overrides)
    choose_direction(task, args.direction)
    module, kind, divisor_or_channels = deployable(task)
    divisor = divisor_or_channels if kind == "image" else 1
    sizes = check_sizes(args.size, args.batch, divisor, args.dynamic)
    example = example_inputs(kind, sizes[0][1], sizes[0][0], divisor_or_channels, seed=0)
    output = Path(args.output)
    export(module, example, output, args.format, args.dynamic)
    atol = args.atol if args.atol is not None else DEFAULT_ATOL[args.format]
    worst = 0.0
    for seed, (batch, size) in enumerate(sizes, start=1):
        inputs = example_inputs(kind, size, batch, divisor_or_channels, seed)
        difference = max_difference(module, output, args.format, inputs)
        worst = max(worst, difference)
        print(f"{args.format} vs PyTorch on input {tuple(inputs.shape)}: max abs difference {difference:.3e}")
    print(f"wrote {output} ({output.stat().st_size / 2**20:.2f} MiB)")
    if worst > atol:
        print(f"error: the exported model differs from PyTorch by {worst:.3e} > --atol {atol:g}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(run(main, parse_args()))
