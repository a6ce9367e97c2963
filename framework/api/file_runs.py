"""A model on files, as tools/infer.py runs it: what each kind of task reads from an input file,
which command-line options it uses (the others are refused, naming them: they would change
nothing), the files it writes (framework/inference/result_files.py) and the loop between them.
tools/infer.py parses the arguments, checks the output folder, shows progress and calls `write`.

    segmentation     an image -> masks/<name>.png and overlays/<name>.png
    image, unpaired  an image -> <name>.png, by the (EMA) generator of --direction
    labels           a label map (index PNG) -> --samples images, <name>.png or <name>_<k>.png
    noise            nothing -> --num images sample_<i>.png from --seed
With --saliency (segmentation, image, unpaired) each input also gives saliency/<name>.png: its
saliency map (Model.saliency; SmoothGrad with --smoothgrad N, seeded by --seed) over the image,
computed in float32 (--amp is for the results' forward passes).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from framework.api.batches import as_image, same_size_batches
from framework.api.saliency import saliency_maps
from framework.data.images import input_half, side_by_side_layouts
from framework.errors import ConfigError
from framework.inference.arrays import rgb_view, to_uint8
from framework.inference.result_files import (
    draw_file,
    saliency_file,
    sample_file,
    segmentation_files,
    translation_file,
)
from framework.visualization.heatmap import heat_overlay
from framework.visualization.masks import overlay, write_index_mask, write_rgb

# Options read by some kinds only (None when not given): given to another, they would be ignored.
SEGMENTATION_OPTIONS = {"--mode": "mode", "--crop": "crop", "--stride": "stride", "--tile-batch": "tile_batch",
                        "--flip": "flip", "--scales": "scales"}
NOISE_OPTIONS = {"--num": "num", "--seed": "seed"}
DEFAULTS = {"num": 16, "seed": 0, "samples": 1}


class FileRun:
    """One kind's run over files. `options`: tools/infer.py's values by attribute name (None: not
    given); `batch_size` and `amp` always given. `spelling`: {attribute: the name a message gives
    it}, else the option's (`--num`): `Model.generate` runs the same refusals in its own names."""

    takes_input = True

    def __init__(self, model, options: dict, spelling: dict | None = None):
        self.model, self.options = model, dict(options)
        self.spelling = spelling
        self.name = type(model.task).__name__
        self.prepare()
        self.refuse_unused()
        self.saliency_score = None
        if self.options.get("saliency") is not None:  # a target the task cannot score is refused before any file
            self.saliency_score = model.task.saliency_score(self.options["saliency"], self.options.get("direction"),
                                                            self.saliency_settings(), model.has_discriminator_weights)

    def value(self, key: str):
        found = self.options.get(key)
        return DEFAULTS[key] if found is None else found

    def spell(self, key: str) -> str:
        """How a message names option `key`: --num for tools/infer.py, num for the Python API."""
        if self.spelling is None:
            return "--" + key.replace("_", "-")
        return self.spelling.get(key, key)

    def given(self, group: dict[str, str], allowed=()) -> str:
        return ", ".join(self.spell(key) for option, key in group.items()
                         if self.options.get(key) is not None and option not in allowed)

    def prepare(self) -> None:
        """Check --direction and build the predictor."""

    def refuse_unused(self) -> None:
        self.refuse_samples()

    def refuse_samples(self) -> None:
        if self.options.get("samples") is not None:
            samples = self.spell("samples")
            raise ConfigError(f"{samples}: {self.name} does not draw images from label maps; {samples} is for "
                              "semantic synthesis (SemanticSynthesisTask)")

    def refuse_segmentation_options(self) -> None:
        if self.given(SEGMENTATION_OPTIONS):
            raise ConfigError(f"{self.given(SEGMENTATION_OPTIONS)}: {self.name} is a GAN, these options are for "
                              "segmentation inference (tiles, test-time augmentation); a generator does not use them")

    def seed_is_used(self) -> tuple[str, ...]:
        """("--seed",) when --seed seeds SmoothGrad's noise here."""
        return ("--seed",) if self.options.get("smoothgrad") is not None else ()

    def saliency_settings(self):
        return None

    def read(self, path: Path) -> np.ndarray:
        return as_image(path, getattr(self.model.task, "in_channels", 3))

    def total(self, paths: list[Path]) -> int:
        return len(paths)

    def result_files(self, output: Path, paths: list[Path]) -> list[Path]:
        found = [file for path in paths for file in self.results(output, path)]
        return found + ([saliency_file(output, path) for path in paths] if self.saliency_score else [])

    def results(self, output: Path, path: Path) -> list[Path]:
        raise NotImplementedError

    def write(self, paths: list[Path], output: Path, advance: Callable[[int], object]) -> None:
        """Read each batch of same-size inputs, write its results (and saliency maps), advance by its size."""
        folders = dict.fromkeys([*(file.parent for file in self.result_files(output, paths[:1])), output])
        for batch in same_size_batches(paths, self.options["batch_size"], self.read):
            for folder in folders:  # once the first batch is read: an unreadable input leaves no empty folders
                folder.mkdir(parents=True, exist_ok=True)  # in the results' order: a failure names the first folder
            folders = {}
            self.write_batch(batch, output)
            if self.saliency_score is not None:
                self.write_saliency(batch, output)
            advance(len(batch))

    def write_batch(self, batch: list[tuple[Path, np.ndarray]], output: Path) -> None:
        raise NotImplementedError

    def write_saliency(self, batch: list[tuple[Path, np.ndarray]], output: Path) -> None:
        samples = self.options.get("smoothgrad")
        found = saliency_maps(self.model, [image for _, image in batch], self.options["saliency"],
                              method="gradient" if samples is None else "smoothgrad", samples=samples or 1,
                              seed=self.value("seed"), batch_size=len(batch), names=[path.stem for path, _ in batch],
                              score=self.saliency_score)
        for (path, image), saliency in zip(batch, found):
            write_rgb(saliency_file(output, path), heat_overlay(rgb_view(image), saliency.heatmap))


class SegmentationFiles(FileRun):
    def prepare(self) -> None:
        self.model.task.refuse_direction(self.options.get("direction"))
        try:
            self.settings = self.model.task.inference.replace(**{key: self.options.get(key)
                                                                 for key in SEGMENTATION_OPTIONS.values()})
        except ValueError as err:
            raise ConfigError(str(err)) from err
        self.predictor = self.model.predictor(self.settings)

    def refuse_unused(self) -> None:
        super().refuse_unused()
        unused = self.given(NOISE_OPTIONS, allowed=self.seed_is_used())
        if unused:
            raise ConfigError(f"{unused}: {self.name} segments --input images; --num and --seed are for a GAN that "
                              "generates from noise (DCGAN) (--seed also seeds --smoothgrad)")

    def saliency_settings(self):
        return self.settings

    def results(self, output: Path, path: Path) -> list[Path]:
        return list(segmentation_files(output, path))

    def write_batch(self, batch, output: Path) -> None:
        labels, _ = self.model.segment_batch(self.predictor, [image for _, image in batch], self.options["amp"])
        palette = self.model.palette
        for (path, image), label in zip(batch, labels.cpu().numpy()):
            mask_file, overlay_file = segmentation_files(output, path)
            write_index_mask(mask_file, label, palette)
            write_rgb(overlay_file, overlay(rgb_view(image), label, palette))


class GeneratorFiles(FileRun):
    def prepare(self) -> None:
        self.predictor = self.model.generator(self.options.get("direction"))

    def refuse_unused(self) -> None:
        super().refuse_unused()
        self.refuse_segmentation_options()


class ImageFiles(GeneratorFiles):
    """pix2pix, CycleGAN: an image in, its translation out; a file of a side-by-side pair folder of
    the config's data (pix2pix's facades, its test split too) gives the half training reads."""

    def prepare(self) -> None:
        super().prepare()
        self.side_by_side = side_by_side_layouts(self.model.config)

    def read(self, path: Path) -> np.ndarray:
        return input_half(path, as_image(path), self.side_by_side)

    def refuse_unused(self) -> None:
        super().refuse_unused()
        unused = self.given(NOISE_OPTIONS, allowed=self.seed_is_used())
        if unused:
            num, seed, source = self.spell("num"), self.spell("seed"), self.spell("input")
            also = f" ({seed} also seeds {self.spell('smoothgrad')})" if self.spelling is None else ""
            raise ConfigError(f"{unused}: {self.name} translates {source} images (conditioning: "
                              f"{self.model.task.conditioning}); {num} and {seed} are for a GAN that generates from "
                              f"noise (DCGAN){also}")

    def results(self, output: Path, path: Path) -> list[Path]:
        return [translation_file(output, path)]

    def write_batch(self, batch, output: Path) -> None:
        images = self.model.translate_batch(self.predictor, [image for _, image in batch], self.options["amp"])
        for (path, _), image in zip(batch, images):
            write_rgb(translation_file(output, path), to_uint8(image))


class LabelMapFiles(GeneratorFiles):
    """Semantic synthesis: label maps (index PNGs: pixel values are class ids) -> --samples images
    each, batched by size. Draw k's noise for a map comes from (--seed, k, <name>) alone
    (framework/inference/noise.py): the same image whatever else shares its batch."""

    def refuse_unused(self) -> None:
        super().refuse_unused()
        if self.options.get("num") is not None:
            num = self.spell("num")
            raise ConfigError(f"{num}: {self.name} draws {self.spell('samples')} images from each {self.spell('input')} "
                              f"label map; {num} is for a GAN that generates from noise alone (DCGAN)")

    def refuse_samples(self) -> None:
        """Label maps are what --samples is for."""

    def read(self, path: Path) -> np.ndarray:
        from framework.data.folder import read_index_mask

        return self.model.check_labels(read_index_mask(str(path)), f"--input: {path}")

    def results(self, output: Path, path: Path) -> list[Path]:
        samples = self.value("samples")
        return [draw_file(output, path, draw, samples) for draw in range(samples)]

    def write_batch(self, batch, output: Path) -> None:
        samples = self.value("samples")
        for draw in range(samples):
            images = self.model.synthesis_batch([labels for _, labels in batch], [path.stem for path, _ in batch],
                                                draw, self.value("seed"), self.options["amp"])
            for (path, _), image in zip(batch, images):
                write_rgb(draw_file(output, path, draw, samples), to_uint8(image))


class NoiseFiles(GeneratorFiles):
    """DCGAN: --num images from --seed, sample i's noise from (--seed, i) alone."""

    takes_input = False

    def refuse_unused(self) -> None:
        super().refuse_unused()
        if self.options.get("input"):
            raise ConfigError(f"{self.spell('input')}: {self.name} generates from noise ({self.spell('num')}, "
                              f"{self.spell('seed')}); it takes no input images")

    def total(self, paths: list[Path]) -> int:
        return self.value("num")

    def result_files(self, output: Path, paths: list[Path]) -> list[Path]:
        return [sample_file(output, index) for index in range(self.value("num"))]

    def write(self, paths: list[Path], output: Path, advance: Callable[[int], object]) -> None:
        output.mkdir(parents=True, exist_ok=True)
        count, batch_size = self.value("num"), self.options["batch_size"]
        for first in range(0, count, batch_size):
            images = self.model.sample_batch(self.predictor, first, min(batch_size, count - first),
                                             self.value("seed"), self.options["amp"])
            for index, image in enumerate(images, start=first):
                write_rgb(sample_file(output, index), to_uint8(image))
            advance(len(images))


RUNS = {"image": ImageFiles, "unpaired": ImageFiles, "labels": LabelMapFiles, "noise": NoiseFiles}


def file_run(model, options: dict, spelling: dict | None = None) -> FileRun:
    """The run of `model`'s kind: a segmenter's, or that of what its generator is conditioned on."""
    kind = RUNS[model.task.conditioning] if model.is_generator else SegmentationFiles
    return kind(model, options, spelling)
