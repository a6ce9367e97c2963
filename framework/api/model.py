"""`Model`: a trained task used from Python, and the batch functions tools/infer.py runs too.

tools/infer.py reads files and writes results; the forward passes, their batching and the noise
of each item are here, so an image from `Model.predict`/`generate` and one from infer.py are
computed by the same lines (tests/test_api.py checks they are bit-identical).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from framework.api.arguments import checked, generate_arguments
from framework.api.batches import (
    DEFAULT_BATCH,
    as_image,
    as_label_map,
    autocast,
    item_name,
    listed,
    same_size_batches,
)
from framework.api.file_runs import file_run
from framework.errors import ConfigError
from framework.inference.arrays import to_tensor, to_uint8
from framework.inference.noise import item_noise
from framework.inference.saliency import DEFAULT_NOISE, DEFAULT_SAMPLES
from framework.inference.segmentation import SegmentationPredictor
from framework.tasks.base import GeneratorTask

DEFAULT_NUM = 16  # images generate() draws from noise when not told how many (as tools/infer.py --num)


class Model:
    """A trained task on a device: segmentation (`predict`) or a generator (`generate`, `translate`).
    Made by `framework.load`; `config` is the resolved config (a plain dict)."""

    def __init__(self, task, config: dict, device: torch.device, source: Path | None = None,
                 metrics: dict | None = None, has_discriminator_weights: bool = True):
        self.task, self.config, self.device, self.source = task, config, device, source
        self.metrics = dict(metrics or {})  # the run's final evaluation, for the model card
        # False for a model folder: it keeps the weights prediction runs, the task's discriminator is untrained
        self.has_discriminator_weights = has_discriminator_weights
        self._synthesizer = None

    def __repr__(self) -> str:
        where = f", from {self.source}" if self.source is not None else ""
        return f"Model({type(self.task).__name__} on {self.device}{where})"

    @property
    def is_generator(self) -> bool:
        return isinstance(self.task, GeneratorTask)

    @property
    def classes(self) -> list[str]:
        names = getattr(self.task, "class_names", None)
        return list(names) if names else [str(i) for i in range(getattr(self.task, "num_classes", 0))]

    @property
    def palette(self) -> np.ndarray | None:
        palette = getattr(self.task, "palette", None)
        return None if palette is None else palette.cpu().numpy()

    def colorize(self, mask: np.ndarray) -> np.ndarray:
        """H x W class ids -> H x W x 3 uint8 colours of `palette` (the ignore index, and any id
        that is no class, white: as the tools' panels show them)."""
        from framework.visualization.palette import colorize

        if getattr(self.task, "palette", None) is None:
            raise ConfigError(f"colorize: {type(self.task).__name__} has no classes to colour")
        if not isinstance(mask, np.ndarray) or mask.ndim != 2 or mask.dtype.kind not in "iu":
            raise ConfigError(f"mask: expected an H x W integer array of class ids, got "
                              f"{getattr(mask, 'dtype', type(mask).__name__)} {getattr(mask, 'shape', '')}".rstrip())
        colours = colorize(torch.as_tensor(mask).long(), self.task.palette.cpu(),
                           getattr(self.task, "ignore_index", None))
        return colours.movedim(-3, -1).numpy()

    # segmentation ------------------------------------------------------------------------------

    def predictor(self, settings=None) -> SegmentationPredictor:
        if self.is_generator:
            raise ConfigError(f"predict: {type(self.task).__name__} is a GAN; use generate (or translate)")
        return self.task.predictor(settings)

    def segment_batch(self, predictor: SegmentationPredictor, images: list[np.ndarray], amp: bool = False,
                      probabilities: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Same-size H x W x C arrays -> (N x H x W class ids, N x classes x H x W probabilities or None)."""
        with autocast(self.device, amp), torch.no_grad():
            logits = predictor.logits(to_tensor(images, self.device))
        labels = predictor.labels(logits)
        if not probabilities:
            return labels, None
        if logits.shape[1] == 1:  # a binary segmenter: P(background), P(foreground)
            foreground = torch.sigmoid(logits.float())
            return labels, torch.cat([1 - foreground, foreground], dim=1)
        return labels, torch.softmax(logits.float(), dim=1)

    def predict(self, images, probabilities: bool = False, batch_size: int = DEFAULT_BATCH, amp: bool = False):
        """Class-id maps (H x W int64 numpy) of one image or a list (paths, PIL images, H x W x 3
        uint8 arrays; any sizes), with the config's `inference:` settings; with `probabilities`,
        (maps, C x H x W float32 probabilities)."""
        flags = checked({"probabilities": probabilities, "amp": amp})
        probabilities, amp = flags["probabilities"], flags["amp"]
        predictor = self.predictor()
        items, single = listed(images)
        numbered = list(enumerate(items))

        def read(entry):
            return as_image(entry[1], self.task.in_channels, item_name("images", entry[0], single))

        labels, probs = [], []
        for batch in same_size_batches(numbered, batch_size, read):
            found, chances = self.segment_batch(predictor, [array for _, array in batch], amp, probabilities)
            labels += list(found.cpu().numpy())
            probs += [] if chances is None else list(chances.cpu().numpy())
        result = (labels, probs) if probabilities else labels
        if single:
            return (labels[0], probs[0]) if probabilities else labels[0]
        return result

    # generators --------------------------------------------------------------------------------

    def generator(self, direction: str | None = None):
        from framework.inference.generator import GeneratorPredictor

        if not self.is_generator:
            raise ConfigError(f"generate: {type(self.task).__name__} segments images; use predict")
        return GeneratorPredictor(self.task.generator_for(self.task.check_direction(direction)),
                                  self.task.noise_shape)

    def translate_batch(self, predictor, images: list[np.ndarray], amp: bool = False) -> torch.Tensor:
        with autocast(self.device, amp):
            return predictor.translate(to_tensor(images, self.device))

    def sample_batch(self, predictor, first: int, count: int, seed: int, amp: bool = False) -> torch.Tensor:
        """Samples first .. first + count - 1 of `seed` (each from its own noise)."""
        noise = predictor.noise(count, seed, self.device, first)
        with autocast(self.device, amp):
            return predictor.sample(noise)

    def synthesis_batch(self, labels: list[np.ndarray], names: list[str], draw: int, seed: int,
                        amp: bool = False, noise: torch.Tensor | None = None) -> torch.Tensor:
        """Draw `draw` from same-size label maps: each map's noise from (seed, draw, its name)."""
        if self._synthesizer is None:  # the label maps' one-hot encoding and the generator, built once
            self._synthesizer = self.task.deployable(None)[0].to(self.device)
        module = self._synthesizer
        if noise is None and self.task.noise_shape is not None:
            noise = item_noise(self.task.noise_shape, seed, draw, names)
        noise = None if noise is None else torch.as_tensor(noise).float().to(self.device)
        maps = torch.from_numpy(np.stack(labels)).to(self.device).float()
        with torch.no_grad(), autocast(self.device, amp):
            return module(maps, noise)

    def check_labels(self, labels: np.ndarray, source: str) -> np.ndarray:
        """An H x W integer map whose values are classes or the ignore index; else a ConfigError
        naming `source`. (A float map is refused: class ids are whole numbers, and an H x W x 3
        colour rendering of a map is not one.)"""
        task = self.task
        if labels.ndim != 2:
            raise ConfigError(f"{source}: a label map is H x W class ids, got shape {tuple(labels.shape)} (a colour "
                              "rendering holds colours, not class ids; several maps go in a list)")
        if labels.dtype.kind not in "iu":
            raise ConfigError(f"{source}: a label map holds integer class ids, got {labels.dtype} values")
        outside = (labels < 0) | (labels >= task.num_classes)
        wrong = np.unique(labels[outside & (labels != task.ignore_index)])
        if wrong.size:
            raise ConfigError(f"{source} holds label {int(wrong[0])}, not a class of this task "
                              f"(0..{task.num_classes - 1}, or {task.ignore_index} for don't-care)")
        return labels

    def generate(self, conditions=None, noise=None, samples: int | None = None, seed: int | None = None,
                 num: int | None = None, names: list[str] | None = None, direction: str | None = None,
                 batch_size: int = DEFAULT_BATCH, amp: bool = False):
        """Images (H x W x 3 uint8) from what the generator takes: `conditions` images to translate
        (pix2pix, CycleGAN with `direction`), label maps (semantic synthesis: `samples` draws each,
        default 1, a list per map when several; `names` key each map's noise as infer.py keys a file
        by its name, default the file name or the index), or nothing (`num` images from `seed`; or
        the given `noise`, N x latent x 1 x 1). An argument this kind of model does not use is
        refused, as tools/infer.py refuses the option."""
        return self._generate(conditions, noise, samples, seed, num, names, direction, batch_size, amp, "conditions")

    def translate(self, images, direction: str | None = None, batch_size: int = DEFAULT_BATCH, amp: bool = False):
        """Images translated by the generator of `direction` (CycleGAN: "AtoB" or "BtoA")."""
        return self._generate(images, None, None, None, None, None, direction, batch_size, amp, "images")

    def _generate(self, conditions, noise, samples, seed, num, names, direction, batch_size, amp, what: str):
        """generate(), its inputs named `what` in a refusal (translate's are `images`)."""
        predictor = self.generator(direction)
        kind = self.task.conditioning
        name = type(self.task).__name__
        if kind == "noise" and conditions is not None:
            raise ConfigError(f"{what}: {name} generates from noise; it takes no {what}")
        if kind != "noise" and conditions is None:
            raise ConfigError(f"{what}: {name} needs {what} ({kind} inputs)")
        items, single = ([], False) if kind == "noise" else listed(conditions, what, 2 if kind == "labels" else 3)
        given = {"seed": seed, "num": num, "samples": samples, "batch_size": batch_size, "amp": amp,
                 "direction": direction, "noise": noise, "names": names}
        used = generate_arguments(self, kind, given, None if kind == "noise" else len(items),
                                  lambda options, spelling: file_run(self, options, spelling=spelling))
        batch_size, amp = used["batch_size"], used["amp"]
        if kind == "noise":
            if used["noise"] is not None:
                with torch.no_grad():
                    images = predictor.sample(used["noise"].to(self.device))
                return [to_uint8(image) for image in images]
            count = DEFAULT_NUM if used["num"] is None else used["num"]
            return [to_uint8(image) for first in range(0, count, batch_size)
                    for image in self.sample_batch(predictor, first, min(batch_size, count - first), used["seed"], amp)]
        if kind == "labels":
            results = self._synthesize(items, single, used, batch_size, amp)
        else:
            def read(entry):
                return as_image(entry[1], 3, item_name(what, entry[0], single))

            results = [to_uint8(image) for batch in same_size_batches(list(enumerate(items)), batch_size, read)
                       for image in self.translate_batch(predictor, [array for _, array in batch], amp)]
        return results[0] if single else results

    def _synthesize(self, items: list, single: bool, used: dict, batch_size: int, amp: bool) -> list:
        keys = used["names"] or [Path(item).stem if isinstance(item, (str, Path)) else str(i)
                                 for i, item in enumerate(items)]
        numbered = list(zip(range(len(items)), items))

        def read(entry):
            index, item = entry
            what = item_name("conditions", index, single)
            return self.check_labels(as_label_map(item, what), what)

        samples, noise = used["samples"], used["noise"]
        draws: list[list[np.ndarray]] = [[] for _ in items]
        for batch in same_size_batches(numbered, batch_size, read):
            indices = [index for (index, _), _ in batch]
            for draw in range(samples):
                images = self.synthesis_batch([labels for _, labels in batch], [keys[i] for i in indices], draw,
                                              used["seed"], amp, None if noise is None else noise[indices])
                for index, image in zip(indices, images):
                    draws[index].append(to_uint8(image))
        return [found[0] if samples == 1 else found for found in draws]

    # saliency ----------------------------------------------------------------------------------

    def saliency(self, images, target, region=None, method: str = "gradient", samples: int = DEFAULT_SAMPLES,
                 noise: float = DEFAULT_NOISE, seed: int = 0, direction: str | None = None,
                 batch_size: int = DEFAULT_BATCH, names: list[str] | None = None):
        """Where the `target`'s score comes from: one `Saliency` (heatmap H x W in [0, 1], gradient
        C x H x W, score) per image (paths, PIL images, H x W x C uint8 arrays; one or a list).
        target: a class (id or name) of a segmenter, whose logits are summed over `region` (an
        H x W boolean mask, a box (x0, y0, x1, y1), or None: the whole image), with the config's
        `inference:` settings; for an image-to-image GAN "output" (the generated pixels in `region`)
        or "discriminator" (its verdict on the generated image). method: "gradient" or "smoothgrad"
        (`samples` noisy copies, noise `noise` x the image's range, drawn from (`seed`, copy, the
        image's name or position): the same map in any batch)."""
        from framework.api.saliency import saliency_maps

        return saliency_maps(self, images, target, region, method, samples, noise, seed, direction, batch_size, names)

    # model folders -----------------------------------------------------------------------------

    def save_pretrained(self, folder, overwrite: bool = False) -> Path:
        """config.yaml + model.safetensors (the weights prediction needs) + README.md (a model card),
        into a new or empty folder, or one this method wrote before; a folder holding any other file
        (a README.md of yours, a config) is refused unless `overwrite=True`, which replaces those
        three names and nothing else."""
        from framework.api.folder import save_model_folder

        if not isinstance(folder, (str, os.PathLike)) or not os.fspath(folder).strip():
            raise ConfigError(f"save_pretrained folder: name the folder to write into (a path), not {folder!r}")
        if not isinstance(overwrite, bool):
            raise ConfigError(f"save_pretrained overwrite: True or False, not {overwrite!r}")
        return save_model_folder(self, Path(folder), overwrite=overwrite)

    def push_to_hub(self, repo: str, **kwargs) -> str:
        """Upload a model folder to the Hugging Face Hub (needs `pip install -e '.[hub]'`)."""
        from framework.api.folder import push_to_hub

        return push_to_hub(self, repo, **kwargs)
