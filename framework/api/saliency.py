"""`Model.saliency`: images in, one `Saliency` per image out (framework/inference/saliency.py), in
batches of same-size images; the task says what is differentiated (`task.saliency_score`)."""

from __future__ import annotations

from pathlib import Path

from framework.api.arguments import names_argument
from framework.api.batches import as_image, item_name, listed, same_size_batches
from framework.inference.arrays import to_tensor
from framework.inference.saliency import (
    DEFAULT_NOISE,
    DEFAULT_SAMPLES,
    Saliency,
    check_method,
    input_gradients,
    saliencies,
)


def item_keys(items: list, names: list[str] | None) -> list[int | str]:
    """What each image's SmoothGrad noise is drawn from: `names`, else a path's file name without its
    suffix (as tools/infer.py names its results), else the image's position."""
    if names is not None:
        return list(names)
    return [Path(item).stem if isinstance(item, (str, Path)) else index for index, item in enumerate(items)]


def saliency_maps(model, images, target, region=None, method: str = "gradient", samples: int = DEFAULT_SAMPLES,
                  noise: float = DEFAULT_NOISE, seed: int = 0, direction: str | None = None, batch_size: int = 4,
                  names: list[str] | None = None, settings=None, score=None) -> Saliency | list[Saliency]:
    """`score`: what `model.task.saliency_score(target, direction, settings, ...)` gives, when the
    caller has it already (tools/infer.py builds it once, before any file is written)."""
    check_method(method, samples, noise, seed)
    items, single = listed(images)
    names = names_argument(names, len(items), "image")
    if score is None:
        score = model.task.saliency_score(target, direction, settings, model.has_discriminator_weights)
    keys = item_keys(items, names)
    channels = getattr(model.task, "in_channels", 3)
    numbered = list(enumerate(items))

    def read(entry):
        return as_image(entry[1], channels, item_name("images", entry[0], single))

    found: list[Saliency] = []
    for batch in same_size_batches(numbered, batch_size, read):
        pixels = to_tensor([array for _, array in batch], model.device).float()
        gradients, scores = input_gradients(score, pixels, region, method, samples, noise, seed,
                                            [keys[index] for (index, _), _ in batch])
        found += saliencies(gradients, scores)
    return found[0] if single else found
