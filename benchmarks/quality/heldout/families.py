"""The scene families of the held-out protocol and the writer that puts one on disk as a user has
it: the VOC layout (JPEGImages/<id>.jpg, SegmentationClass/<id>.png palette masks whose indices
are the classes, ImageSets/Segmentation/train.txt and val.txt), read by the framework's
`VOCSegmentation`.

Every family differs from the framework's SyntheticTextures (64x64, 3-6 Voronoi cells, 7 equally
likely classes of stripes/checks/dots/grain, one colour per image): other textures and scales, other
colour schemes, region shapes and counts, imbalanced classes, 128x128 images. A region's colour is
drawn independently of its class, so only the texture tells the classes apart. `HELD_OUT` is never
used for tuning; its results are reported apart.
"""

import json
import shutil
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from framework.errors import ConfigError

from . import scenes

MARKER = ".heldout_family.json"
WRITTEN = ("JPEGImages", "SegmentationClass", "ImageSets")


@dataclass(frozen=True)
class Family:
    name: str
    size: int
    classes: tuple  # (class name, texture painter) pairs
    weights: tuple  # each region's class is drawn with these probabilities: the pixel frequencies' expectation
    layout: object
    colours: str  # "region": a random colour per region; "duotone": two random colours per image; "jitter": per
    # region colour and contrast, plus pixel noise
    train: int
    val: int

    @property
    def class_names(self) -> list[str]:
        return [name for name, _ in self.classes]


FAMILIES = {f.name: f for f in (
    Family("gratings", 64,
           (("flat", scenes.flat()), ("fine_grating", scenes.grating(3.0)), ("coarse_grating", scenes.grating(8.0)),
            ("rings", scenes.rings(6.0)), ("clouds", scenes.clouds(8)), ("spots", scenes.spots(6.0, 1.6)),
            ("zigzag", scenes.zigzag(8.0, 3.0))),
           (1 / 7,) * 7, scenes.voronoi(4, 9), "region", 1000, 200),
    Family("bands128", 128,
           (("coarse_clouds", scenes.clouds(16)), ("fine_clouds", scenes.clouds(3)), ("bricks", scenes.bricks(8, 16)),
            ("checks", scenes.checks(5.0)), ("speckle", scenes.speckle(0.08))),
           (0.40, 0.25, 0.17, 0.11, 0.07), scenes.bands(3, 7, 6.0), "duotone", 600, 150),
    Family("blobs", 64,
           (("axis_stripes", scenes.grating(5.0, angles=(0.0, np.pi / 2))), ("big_spots", scenes.spots(8.0, 2.5)),
            ("zigzag", scenes.zigzag(6.0, 2.0)), ("small_checks", scenes.checks(3.0)), ("grain", scenes.clouds(2)),
            ("plain", scenes.flat())),
           (0.30, 0.22, 0.18, 0.14, 0.10, 0.06), scenes.blobs(2, 5, 16), "jitter", 800, 200),
)}
HELD_OUT = "blobs"
TUNING = [name for name in FAMILIES if name != HELD_OUT]


def palette(classes: int) -> list[int]:
    """VOC's bit-interleaved colour map for `classes` entries (how viewers show the indices)."""
    colours = []
    for index in range(classes):
        r = g = b = 0
        c = index
        for shift in range(7, -1, -1):
            r |= ((c >> 0) & 1) << shift
            g |= ((c >> 1) & 1) << shift
            b |= ((c >> 2) & 1) << shift
            c >>= 3
        colours += [r, g, b]
    return colours + [0] * (768 - len(colours))


def render(family: Family, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(H x W x 3 uint8 image, H x W uint8 class map) of one scene."""
    size = family.size
    regions = family.layout(size, rng)
    yy, xx = np.mgrid[:size, :size].astype(float)
    labels = np.zeros((size, size), dtype=np.uint8)
    image = np.zeros((size, size, 3))
    pair = rng.uniform(20, 235, (2, 3))  # duotone's two colours of this image
    for region in range(regions.max() + 1):
        inside = regions == region
        if not inside.any():
            continue
        cls = rng.choice(len(family.classes), p=family.weights)
        labels[inside] = cls
        field = family.classes[cls][1](yy, xx, rng)[inside]
        field = field - field.mean()  # the region's mean colour is its drawn colour, whatever the texture
        if family.colours == "duotone":
            mix = (field[:, None] + 1) / 2
            image[inside] = pair[0] * (1 - mix) + pair[1] * mix
        else:
            contrast = 50.0 if family.colours == "region" else rng.uniform(30, 70)
            image[inside] = rng.uniform(50, 205, 3) + contrast * field[:, None]
    if family.colours == "jitter":
        image += rng.normal(0, 5, image.shape)
    return np.clip(np.rint(image), 0, 255).astype(np.uint8), labels


def _marker(family: Family, seed: int, train: int, val: int, complete: bool) -> dict:
    return {"family": family.name, "seed": seed, "train": train, "val": val, "complete": complete}


def write_family(name: str, root, seed: int = 0, train: int | None = None, val: int | None = None) -> Path:
    """Write family `name` into `root` (created), deterministic from `seed`; `train`/`val` override
    the family's counts (small trees for tests). A folder already written with the same settings
    is kept as it is; a non-empty folder without this writer's marker is refused."""
    if name not in FAMILIES:
        raise ConfigError(f"family '{name}': not one of {', '.join(FAMILIES)}")
    family = FAMILIES[name]
    train = family.train if train is None else train
    val = family.val if val is None else val
    root = Path(root)
    marker = root / MARKER
    if root.exists() and any(root.iterdir()):
        if not marker.is_file():
            raise ConfigError(f"{root}: not empty and not written by this protocol (no {MARKER}); give an empty "
                              f"or new folder")
        if json.loads(marker.read_text()) == _marker(family, seed, train, val, True):
            return root
        for folder in WRITTEN:  # ours, unfinished or of other settings: written anew
            shutil.rmtree(root / folder, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps(_marker(family, seed, train, val, False)))
    for folder in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    colours = palette(len(family.classes))
    for split, count in (("train", train), ("val", val)):
        names = [f"{split}_{i:05d}" for i in range(count)]
        for i, stem in enumerate(names):
            rng = np.random.default_rng([seed, zlib.crc32(name.encode()), 0 if split == "train" else 1, i])
            image, labels = render(family, rng)
            Image.fromarray(image).save(root / "JPEGImages" / f"{stem}.jpg", quality=92)
            mask = Image.fromarray(labels, mode="P")
            mask.putpalette(colours)
            mask.save(root / "SegmentationClass" / f"{stem}.png")
        (root / "ImageSets" / "Segmentation" / f"{split}.txt").write_text("\n".join(names) + "\n")
    marker.write_text(json.dumps(_marker(family, seed, train, val, True)))
    return root
