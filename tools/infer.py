"""Run a trained model on your own images (any size):

    python tools/infer.py --config CFG --checkpoint CKPT --input FILE|DIR|GLOB [...] --output DIR
        [--mode whole|slide --crop H W --stride H W --tile-batch N] [--flip] [--scales 0.75 1 1.25]
        [--batch-size N] [--device cpu|cuda] [--amp] [--direction AtoB|BtoA]
        [--saliency TARGET [--smoothgrad N] [--seed S]] [key=value ...]

Segmentation writes <output>/masks/<name>.png (palette PNGs whose pixel values are the class
ids) and <output>/overlays/<name>.png (the image blended with the class colours), each at its
input's size. Options not given come from the task's `inference:` settings.
A conditional GAN (pix2pix) writes <output>/<name>.png from each input; an unconditional one
(DCGAN) writes --num images from noise drawn with --seed (no --input). A CycleGAN translates
with the (EMA) generator of --direction AtoB or BtoA. A semantic synthesis task turns label maps
(index PNGs, pixel values the class ids) into --samples images each (<name>_<k>.png for several).
A seed names images: sample_<i>.png's noise depends only on --seed and i, draw k of a label map's
only on --seed, k and the map's file name without its suffix; not on --batch-size, --num or the
other inputs of the run.
No result is written over a file the run reads: an --output folder that is or directly holds an
input (symlinks followed), or whose results would land on one, is refused before anything is written.
With --saliency TARGET each input also gives <output>/saliency/<name>.png, its saliency map over the
image: where the gradient of the target's score with respect to the input pixels is large (a
segmenter: TARGET is a class id or name, its logits summed over the image; pix2pix, CycleGAN:
"output", the generated image, or "discriminator", its verdict on it). --smoothgrad N averages
the gradient over N noisy copies of each image (SmoothGrad), seeded by --seed and the file name.
An option the task does not use is refused, naming it: the segmentation options (--mode, --crop,
--stride, --tile-batch, --flip, --scales) on a GAN, --num/--seed where the generator does not
draw from noise (--seed is used with --smoothgrad), --input where it does, --samples where it
does not take label maps, --saliency where the input is not an image.
The kinds (what each reads, writes and uses) are framework/api/file_runs.py's; this tool parses the
arguments, checks the output folder, shows progress and reports the time.
"""

import argparse
import sys
import time
from pathlib import Path

from tqdm import tqdm

from framework.api.arguments import checked, option
from framework.api.file_runs import DEFAULTS, SEGMENTATION_OPTIONS, file_run
from framework.api.model import Model
from framework.data.folder import list_inputs
from framework.engine.build import select_device
from framework.engine.trained import load_trained_task
from framework.errors import ConfigError
from framework.inference.result_files import distinct_inputs
from framework.runtime.cli import given_path, output_folder, run
from framework.runtime.overwrite import refuse_writing_over_inputs

# Given to the kind's run as they were given (None: not given), so it can refuse those it does not use.
RUN_OPTIONS = (*SEGMENTATION_OPTIONS.values(), "num", "seed", "samples", "direction", "saliency", "smoothgrad",
               "batch_size", "amp", "input")


def parse_args() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, type=given_path, help="the config the model was trained with")
    parser.add_argument("--checkpoint", required=True, type=given_path, help="training checkpoint (.pth)")
    parser.add_argument("--input", nargs="+", default=[], type=given_path, help="image files, folders or glob patterns")
    parser.add_argument("--output", required=True, type=output_folder, help="folder for the results")
    parser.add_argument("--mode", choices=["whole", "slide"], help="whole image, or sliding window tiles")
    parser.add_argument("--crop", type=int, nargs=2, metavar=("H", "W"), help="slide: tile size")
    parser.add_argument("--stride", type=int, nargs=2, metavar=("H", "W"), help="slide: step between tiles")
    parser.add_argument("--tile-batch", type=int, help="slide: tiles per forward pass")
    parser.add_argument("--flip", action="store_true", default=None, help="add horizontally flipped predictions")
    parser.add_argument("--scales", type=float, nargs="+", help="multi-scale test-time augmentation")
    parser.add_argument("--batch-size", type=int, default=4, help="images per forward pass (same-size images)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    parser.add_argument("--amp", action="store_true", help="autocast (float16 on CUDA, bfloat16 on CPU)")
    parser.add_argument("--num", type=int, help=f"unconditional GAN: images to generate (default {DEFAULTS['num']})")
    parser.add_argument("--samples", type=int,
                        help="semantic synthesis: images per label map, each from other noise (draws 0, 1, ...; default 1)")
    parser.add_argument("--seed", type=int,
                        help="unconditional GAN, semantic synthesis: noise seed (default 0); sample i, or draw k of "
                             "the map <name>, is the same image at any --batch-size, --num and with any other inputs; "
                             "with --smoothgrad: its noise's seed")
    parser.add_argument("--direction", choices=["AtoB", "BtoA"], help="CycleGAN: the generator to translate with")
    parser.add_argument("--saliency", metavar="TARGET",
                        help="also write saliency/<name>.png: a class id or name (segmentation), or output or "
                             "discriminator (pix2pix, CycleGAN)")
    parser.add_argument("--smoothgrad", type=int, metavar="N",
                        help="--saliency by SmoothGrad: the gradient averaged over N noisy copies of each image")
    parser.add_argument("--progress", choices=["auto", "on", "off"], default="auto", help="progress bar")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    return parser


def check_infer_options(args: argparse.Namespace) -> None:
    """Refuse option values no run can use, before the model is loaded."""
    # the rules the Python API checks its arguments by (framework/api/arguments.py), in the options' spelling
    checked({key: getattr(args, key) for key in ("batch_size", "tile_batch", "crop", "stride", "scales", "num",
                                                 "samples", "smoothgrad", "seed")}, spell=option)
    if args.smoothgrad is not None and args.saliency is None:
        raise ConfigError("--smoothgrad: smooths a saliency map; give --saliency TARGET with it")


def main(args: argparse.Namespace) -> None:
    check_infer_options(args)
    device = select_device(args.device)
    task, plain = load_trained_task(args.config, args.checkpoint, args.overrides, device)
    files = file_run(Model(task, plain, device), {key: getattr(args, key) for key in RUN_OPTIONS})
    output = Path(args.output)
    if files.takes_input and not args.input:
        raise ConfigError("--input: give image files, folders or glob patterns")
    paths = distinct_inputs(list_inputs(args.input)) if files.takes_input else []
    inputs = [*(("--input", given) for given in args.input if Path(given).exists()), *(("--input", p) for p in paths)]
    refuse_writing_over_inputs("--output", output, inputs, files.result_files(output, paths),
                               other_reads=[("--config", args.config), ("--checkpoint", args.checkpoint)])
    total = files.total(paths)
    show = sys.stdout.isatty() if args.progress == "auto" else args.progress == "on"
    bar = tqdm(total=total, disable=not show, file=sys.stdout, unit="image", leave=False)
    start = time.perf_counter()
    files.write(paths, output, bar.update)
    bar.close()
    seconds = time.perf_counter() - start
    print(f"{total} images in {seconds:.2f}s ({total / max(seconds, 1e-9):.2f} images/s) -> {output}")


if __name__ == "__main__":
    sys.exit(run(main, parse_args()))
