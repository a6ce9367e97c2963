"""Run a trained model on your own images (any size):

    python tools/infer.py --config CFG --checkpoint CKPT --input FILE|DIR|GLOB [...] --output DIR
        [--mode whole|slide --crop H W --stride H W --tile-batch N] [--flip] [--scales 0.75 1 1.25]
        [--batch-size N] [--device cpu|cuda] [--amp] [--direction AtoB|BtoA] [key=value ...]

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
An option the task does not use is refused, naming it: the segmentation options (--mode, --crop,
--stride, --tile-batch, --flip, --scales) on a GAN, --num/--seed where the generator does not
draw from noise, --input where it does, --samples where it does not take label maps.
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from framework.api.model import DEFAULT_NUM, Model, as_image, same_size_batches
from framework.config.rules import integer, number
from framework.config.schema import SEED_MAX
from framework.data.folder import list_inputs
from framework.engine.build import select_device
from framework.engine.trained import load_trained_task
from framework.errors import ConfigError
from framework.inference.arrays import rgb_view, to_uint8
from framework.inference.result_files import (
    distinct_inputs,
    draw_file,
    result_files,
    sample_file,
    segmentation_files,
    translation_file,
)
from framework.runtime.cli import check_options, run
from framework.runtime.overwrite import refuse_writing_over_inputs
from framework.tasks.base import GeneratorTask
from framework.visualization.masks import overlay, write_index_mask, write_rgb

# Options read by one kind of task only (None when not given): given to another, they would be ignored.
SEGMENTATION_OPTIONS = {"--mode": "mode", "--crop": "crop", "--stride": "stride", "--tile-batch": "tile_batch",
                        "--flip": "flip", "--scales": "scales"}
NOISE_OPTIONS = {"--num": "num", "--seed": "seed"}


def parse_args() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="the config the model was trained with")
    parser.add_argument("--checkpoint", required=True, help="training checkpoint (.pth)")
    parser.add_argument("--input", nargs="+", default=[], help="image files, folders or glob patterns")
    parser.add_argument("--output", required=True, help="folder for the results")
    parser.add_argument("--mode", choices=["whole", "slide"], help="whole image, or sliding window tiles")
    parser.add_argument("--crop", type=int, nargs=2, metavar=("H", "W"), help="slide: tile size")
    parser.add_argument("--stride", type=int, nargs=2, metavar=("H", "W"), help="slide: step between tiles")
    parser.add_argument("--tile-batch", type=int, help="slide: tiles per forward pass")
    parser.add_argument("--flip", action="store_true", default=None, help="add horizontally flipped predictions")
    parser.add_argument("--scales", type=float, nargs="+", help="multi-scale test-time augmentation")
    parser.add_argument("--batch-size", type=int, default=4, help="images per forward pass (same-size images)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    parser.add_argument("--amp", action="store_true", help="autocast (float16 on CUDA, bfloat16 on CPU)")
    parser.add_argument("--num", type=int, help=f"unconditional GAN: images to generate (default {DEFAULT_NUM})")
    parser.add_argument("--samples", type=int,
                        help="semantic synthesis: images per label map, each from other noise (draws 0, 1, ...; default 1)")
    parser.add_argument("--seed", type=int,
                        help="unconditional GAN, semantic synthesis: noise seed (default 0); sample i, or draw k of "
                             "the map <name>, is the same image at any --batch-size, --num and with any other inputs")
    parser.add_argument("--direction", choices=["AtoB", "BtoA"], help="CycleGAN: the generator to translate with")
    parser.add_argument("--progress", choices=["auto", "on", "off"], default="auto", help="progress bar")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    return parser


def read_input(model: Model):
    """How an --input file is read: as `Model.predict` reads a path (RGB, or N-channel files for a
    network trained on N channels)."""
    channels = getattr(model.task, "in_channels", 3)
    return lambda path: as_image(path, channels)


def segment(model: Model, settings, paths, args, output: Path, bar) -> None:
    predictor = model.predictor(settings)
    palette = model.palette
    (output / "masks").mkdir(parents=True, exist_ok=True)
    (output / "overlays").mkdir(parents=True, exist_ok=True)
    for batch in same_size_batches(paths, args.batch_size, read_input(model)):
        labels, _ = model.segment_batch(predictor, [image for _, image in batch], args.amp)
        for (path, image), label in zip(batch, labels.cpu().numpy()):
            mask_file, overlay_file = segmentation_files(output, path)
            write_index_mask(mask_file, label, palette)
            write_rgb(overlay_file, overlay(rgb_view(image), label, palette))
        bar.update(len(batch))


def generate(model: Model, paths, args, output: Path, bar) -> None:
    predictor = model.generator(args.direction)
    output.mkdir(parents=True, exist_ok=True)
    if model.task.conditioning == "labels":
        synthesize(model, paths, args, output, bar)
        return
    if model.task.conditioning == "noise":
        for first in range(0, args.num, args.batch_size):
            images = model.sample_batch(predictor, first, min(args.batch_size, args.num - first), args.seed, args.amp)
            for i, image in enumerate(images, start=first):
                write_rgb(sample_file(output, i), to_uint8(image))
            bar.update(len(images))
        return
    for batch in same_size_batches(paths, args.batch_size, as_image):
        images = model.translate_batch(predictor, [image for _, image in batch], args.amp)
        for (path, _), image in zip(batch, images):
            write_rgb(translation_file(output, path), to_uint8(image))
        bar.update(len(batch))


def synthesize(model: Model, paths, args, output: Path, bar) -> None:
    """Label maps (index PNGs: pixel values are class ids) -> --samples images each: <name>.png, or
    <name>_<k>.png for several draws, batched by size (maps of mixed sizes are fine). Draw k's noise
    for a map comes from (--seed, k, <name>) alone (framework/inference/noise.py): the same image
    whatever else shares its batch."""
    from framework.data.folder import read_index_mask

    def read_classes(path: Path) -> np.ndarray:
        return model.check_labels(read_index_mask(str(path)), f"--input: {path}")

    for batch in same_size_batches(paths, args.batch_size, read_classes):
        chunk = [path for path, _ in batch]
        for draw in range(args.samples):
            images = model.synthesis_batch([labels for _, labels in batch], [path.stem for path in chunk], draw,
                                           args.seed, args.amp)
            for path, image in zip(chunk, images):
                write_rgb(draw_file(output, path, draw, args.samples), to_uint8(image))
        bar.update(len(chunk))


def check_infer_options(args: argparse.Namespace) -> None:
    """Refuse option values no run can use, before the model is loaded."""
    check_options({"--batch-size": (args.batch_size, integer(1)), "--tile-batch": (args.tile_batch, integer(1)),
                   "--crop": (args.crop, integer(1)), "--stride": (args.stride, integer(1)),
                   "--scales": (args.scales, number(above=0, finite=True)), "--num": (args.num, integer(1)),
                   "--samples": (args.samples, integer(1)),
                   "--seed": (args.seed, integer(0, max=SEED_MAX))})


def given(args: argparse.Namespace, options: dict[str, str]) -> str:
    return ", ".join(option for option, attribute in options.items() if getattr(args, attribute) is not None)


def refuse_unused_options(task, args: argparse.Namespace) -> None:
    """A ConfigError naming the options this task would ignore (its output would not change)."""
    name = type(task).__name__
    takes_label_maps = isinstance(task, GeneratorTask) and task.conditioning == "labels"
    if args.samples is not None and not takes_label_maps:
        raise ConfigError(f"--samples: {name} does not draw images from label maps; --samples is for semantic "
                          "synthesis (SemanticSynthesisTask)")
    if not isinstance(task, GeneratorTask):
        if given(args, NOISE_OPTIONS):
            raise ConfigError(f"{given(args, NOISE_OPTIONS)}: {name} segments --input images; --num and --seed "
                              "are for a GAN that generates from noise (DCGAN)")
        return
    if given(args, SEGMENTATION_OPTIONS):
        raise ConfigError(f"{given(args, SEGMENTATION_OPTIONS)}: {name} is a GAN, these options are for "
                          "segmentation inference (tiles, test-time augmentation); a generator does not use them")
    if task.conditioning == "noise":
        if args.input:
            raise ConfigError(f"--input: {name} generates from noise (--num, --seed); it takes no input images")
    elif task.conditioning == "labels":
        if args.num is not None:
            raise ConfigError(f"--num: {name} draws --samples images from each --input label map; --num is for a "
                              "GAN that generates from noise alone (DCGAN)")
    elif given(args, NOISE_OPTIONS):
        raise ConfigError(f"{given(args, NOISE_OPTIONS)}: {name} translates --input images "
                          f"(conditioning: {task.conditioning}); --num and --seed are for a GAN that generates "
                          "from noise (DCGAN)")


def main(args: argparse.Namespace) -> None:
    check_infer_options(args)
    device = select_device(args.device)
    task, plain = load_trained_task(args.config, args.checkpoint, args.overrides, device)
    segmentation = not isinstance(task, GeneratorTask)
    if segmentation and args.direction is not None:
        raise ConfigError(f"--direction: {type(task).__name__} has no generators; --direction is for a task that "
                          "translates both ways (CycleGANTask)")
    if not segmentation:
        task.check_direction(args.direction)
    refuse_unused_options(task, args)
    args.num = DEFAULT_NUM if args.num is None else args.num
    args.seed = 0 if args.seed is None else args.seed
    args.samples = 1 if args.samples is None else args.samples
    output = Path(args.output)
    unconditional = not segmentation and task.conditioning == "noise"
    if not unconditional and not args.input:
        raise ConfigError("--input: give image files, folders or glob patterns")
    paths = [] if unconditional else distinct_inputs(list_inputs(args.input))
    kind = "segmentation" if segmentation else task.conditioning if task.conditioning in ("noise", "labels") else "image"
    inputs = [*(("--input", given) for given in args.input if Path(given).exists()), *(("--input", p) for p in paths)]
    refuse_writing_over_inputs("--output", output, inputs, result_files(kind, output, paths, args.samples, args.num),
                               other_reads=[("--config", args.config), ("--checkpoint", args.checkpoint)])
    total = args.num if unconditional else len(paths)
    show = sys.stdout.isatty() if args.progress == "auto" else args.progress == "on"
    bar = tqdm(total=total, disable=not show, file=sys.stdout, unit="image", leave=False)
    start = time.perf_counter()
    if segmentation:
        try:
            settings = task.inference.replace(mode=args.mode, crop=args.crop, stride=args.stride,
                                              tile_batch=args.tile_batch, flip=args.flip, scales=args.scales)
        except ValueError as err:
            raise ConfigError(str(err)) from err
        segment(Model(task, plain, device), settings, paths, args, output, bar)
    else:
        generate(Model(task, plain, device), paths, args, output, bar)
    bar.close()
    seconds = time.perf_counter() - start
    print(f"{total} images in {seconds:.2f}s ({total / max(seconds, 1e-9):.2f} images/s) -> {output}")


if __name__ == "__main__":
    sys.exit(run(main, parse_args()))
