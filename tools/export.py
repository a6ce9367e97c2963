"""Export a trained model to ONNX or TorchScript and check it against PyTorch:

    python tools/export.py --config CFG --checkpoint CKPT --format onnx|torchscript --output FILE
        [--dynamic] [--size H W] [--batch N] [--atol X] [--direction AtoB|BtoA] [key=value ...]

The exported model takes float32 RGB images with values 0..255 (N x 3 x H x W; segmentation:
normalisation inside, logits out; pix2pix, CycleGAN: images in [0, 1] out) or, for an
unconditional GAN, noise (N x latent_dim x 1 x 1). An image of any height and width gives an
output of that size: the padding to the network's size divisor and the crop back are inside the
exported graph, as in tools/infer.py. With --dynamic the batch, height and width are free (ONNX
dynamic axes; TorchScript is traced, which keeps sizes free for the framework's networks).
A CycleGAN exports one generator, the (EMA) one of --direction AtoB or BtoA.

Before the file is written, the exported model (onnxruntime for ONNX) and PyTorch run on the
same random batch, at the export size and, with --dynamic, at three more sizes and batch sizes
(odd sides among them, which no size divisor divides); the max
absolute difference is printed. When it exceeds --atol (default 1e-4 for ONNX, 1e-5 for
TorchScript) or an output is not finite, the exit status is 1 and no file is left at --output.
A checkpoint with NaN or inf weights is refused. ONNX needs the optional extra:
pip install -e ".[export]".
"""

import argparse
import errno
import math
import os
import sys
from pathlib import Path

from framework.config.rules import integer, number
from framework.engine.trained import load_trained_task
from framework.inference.export import FORMATS, export, max_difference, require_onnx
from framework.runtime.cli import MAX_BATCH, MAX_SIDE, given_path, output_file, run
from framework.runtime.cli import check_options as check_options_against
from framework.runtime.overwrite import refuse_writing_over_inputs

DEFAULT_ATOL = {"onnx": 1e-4, "torchscript": 1e-5}


def parse_args() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, type=given_path, help="the config the model was trained with")
    parser.add_argument("--checkpoint", type=given_path, help="training checkpoint (.pth); without it, the initial weights")
    parser.add_argument("--format", required=True, choices=FORMATS)
    parser.add_argument("--output", required=True, type=output_file, help="file to write (.onnx, .pt)")
    parser.add_argument("--dynamic", action="store_true", help="free batch size, height and width")
    parser.add_argument("--size", type=int, nargs=2, default=[256, 256], metavar=("H", "W"),
                        help="input size of the export (with --dynamic: the traced size; any size works)")
    parser.add_argument("--batch", type=int, default=1, help="example batch size")
    parser.add_argument("--atol", type=float, help="largest accepted difference from PyTorch")
    parser.add_argument("--direction", choices=["AtoB", "BtoA"], help="CycleGAN: the generator to export")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    return parser


def check_options(args: argparse.Namespace) -> None:
    """Refuse option values no export can use, before anything is loaded."""
    check_options_against({"--size": (args.size, integer(1, max=MAX_SIDE)), "--batch": (args.batch, integer(1, max=MAX_BATCH)),
                           "--atol": (args.atol, number(min=0, finite=True))})


def check_sizes(size: list[int], batch: int, dynamic: bool) -> list[tuple[int, tuple[int, int]]]:
    """(batch, (H, W)) to compare at: the export size and, with --dynamic, three more: larger,
    and two with sides of the other parity than the export size's (an even export size gives
    odd ones, which no size divisor divides: a traced graph that kept the export size's padding,
    or none, shows there as a difference or another output size)."""
    h, w = size
    sizes = [(batch, (h, w))]
    if dynamic:
        sizes += [(batch + 1, (h + 16, w + 8)), (1, (h + 17, w + 41)), (2, (max(1, h // 2 + 1), max(1, w // 2 - 1)))]
    return sizes


def compare(module, staged: Path, args, kind: str, sizes) -> tuple[float, tuple]:
    """(worst max abs difference, the input shape it was found at); NaN when an output is not finite."""
    worst, where = 0.0, ()
    for seed, (batch, size) in enumerate(sizes, start=1):
        inputs = module.example_inputs(size, batch, seed)
        difference = max_difference(module, staged, args.format, inputs, kind)
        print(f"{args.format} vs PyTorch on input {tuple(inputs[0].shape)}: max abs difference {difference:.3e}")
        if not (difference <= worst):  # NaN (a non-finite output) wins over any number
            worst, where = difference, tuple(inputs[0].shape)
    return worst, where


def main(args: argparse.Namespace) -> int:
    check_options(args)
    reads = [("--config", args.config), *([("--checkpoint", args.checkpoint)] if args.checkpoint else [])]
    refuse_writing_over_inputs("--output", args.output, reads, [args.output], output_is_folder=False)
    if args.format == "onnx":
        require_onnx()  # refuse before any work when the extra is missing
    task, _ = load_trained_task(args.config, args.checkpoint, args.overrides)  # refuses NaN/inf weights
    module, kind, _ = task.deployable(args.direction)
    sizes = check_sizes(args.size, args.batch, args.dynamic)
    example = module.example_inputs(sizes[0][1], sizes[0][0], 0)  # what the module takes, at the export size
    output = Path(args.output)
    if output.parent.exists() and not output.parent.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(output.parent))
    staged = output.with_name(f".{output.name}.unchecked-{os.getpid()}")  # at --output only once checked
    try:
        try:
            export(module, example, staged, args.format, args.dynamic, kind)
        except OSError as err:  # name the file the user asked for, not the temporary one
            ours = str(err.filename or "").startswith(str(staged))
            raise OSError(err.errno, err.strerror, str(output) if ours else err.filename) from err
        atol = args.atol if args.atol is not None else DEFAULT_ATOL[args.format]
        worst, where = compare(module, staged, args, kind, sizes)
        if math.isnan(worst):
            print(f"error: the exported model or PyTorch gives non-finite outputs on input {where}; "
                  f"nothing written to {output}", file=sys.stderr)
            return 1
        if not worst <= atol:
            # at another height and width than the traced one (a noise input has one size: never)
            dynamic = " (--dynamic: the traced graph does not follow this input size; export at the size you " \
                      "deploy, without --dynamic)" if args.dynamic and where[-2:] != example[0].shape[-2:] else ""
            print(f"error: the exported model differs from PyTorch by {worst:.3e} > --atol {atol:g} on input "
                  f"{where}{dynamic}; nothing written to {output}", file=sys.stderr)
            return 1
        os.replace(staged, output)
    finally:
        if staged.exists():  # (unlink(missing_ok) raises when a parent is not a folder)
            staged.unlink()
    print(f"wrote {output} ({output.stat().st_size / 2**20:.2f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(run(main, parse_args()))
