"""Small trees in the published layouts, with the published file names and encodings, to try a
config before downloading gigabytes (tools/make_fixture_dataset.py) and for the tests.

Each label map walks through every stored value of its dataset (over the samples of a split), so
a reader's table is exercised entry by entry; images are random pixels of a small size with the
dataset's aspect. `write_fixture_tree(layout, out)` returns the folder to point `root` at.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

from framework.data.published.cityscapes import CITYSCAPES_LABELS, LABEL_ID_PALETTE, LABEL_ID_TO_TRAIN_ID
from framework.data.published.cocostuff import COCO_STUFF_182_CLASSES, ID_TO_TRAIN_ID
from framework.runtime.overwrite import refuse_foreign_folder
from framework.visualization.palette import default_palette

LAYOUTS = ("cityscapes", "ade20k", "cocostuff", "voc_sbd", "facades", "horse2zebra")
BLOCK = 4  # label maps are blocks of BLOCK x BLOCK pixels, each one stored value
CITIES = {"train": ("aachen", "bochum"), "val": ("frankfurt",), "test": ("berlin",)}
FIRST_INSTANCE_LABEL = 24  # person..bicycle have instances: instanceIds store labelId * 1000 + k
# VOC + SBD names chosen so trainaug's set arithmetic has every case: VOC train only (a), VOC train
# and SBD (b, c: VOC's map wins), SBD only (f, g, h), in VOC val and SBD (d, e: left out)
VOC_TRAIN, VOC_VAL = ("2007_000a", "2007_000b", "2007_000c"), ("2007_000d", "2007_000e")
SBD_TRAIN, SBD_VAL = ("2007_000b", "2007_000f", "2007_000g", "2007_000d"), ("2007_000h", "2007_000e", "2007_000c")
# horse2zebra's file stems are the ImageNet synsets of its two domains (horses, zebras)
HORSE_SYNSET, ZEBRA_SYNSET = "n02381460", "n02391049"
# the list of files a fixture tree holds, so a rewrite replaces its own files and refuses others'
MARKER, MARKER_HEADER = ".segan_fixture", "# written by tools/make_fixture_dataset.py; the files of this fixture tree:"


def value_blocks(height: int, width: int, values, offset: int) -> np.ndarray:
    """An H x W map of BLOCK-pixel squares taking `values` in turn, starting `offset` values in."""
    values = np.asarray(values)
    rows, cols = np.indices((height, width))
    block = (rows // BLOCK) * ((width + BLOCK - 1) // BLOCK) + cols // BLOCK
    return values[(block + offset) % len(values)]


def write_png(path: Path, array: np.ndarray, palette: np.ndarray | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    image = Image.fromarray(array)
    if palette is not None:  # a palette ("P") PNG: the stored values are palette indices
        image = Image.fromarray(array.astype(np.uint8), mode="P")
        image.putpalette(np.asarray(palette, dtype=np.uint8).ravel().tolist())
    image.save(path)


def write_image(path: Path, rng: np.random.Generator, height: int, width: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(path, quality=95)


def write_cityscapes(out: Path, samples: int, rng: np.random.Generator, train_ids: bool) -> Path:
    """leftImg8bit/ + gtFine/ (labelIds, 16-bit instanceIds, color; labelTrainIds with `train_ids`)."""
    label_ids = [row[1] for row in CITYSCAPES_LABELS]
    colours = np.asarray(LABEL_ID_PALETTE, dtype=np.uint8)
    for split, cities in CITIES.items():
        for k in range(samples):
            city = cities[k % len(cities)]
            stem = f"{city}_{k:06d}_{19 + k:06d}"
            write_image(out / "leftImg8bit" / split / city / f"{stem}_leftImg8bit.png", rng, 32, 64)
            labels = value_blocks(32, 64, label_ids, offset=7 * k).astype(np.uint8)
            gt = out / "gtFine" / split / city
            write_png(gt / f"{stem}_gtFine_labelIds.png", labels)
            blocks = value_blocks(32, 64, np.arange(32 * 64), offset=0)
            instances = np.where(labels >= FIRST_INSTANCE_LABEL, labels.astype(np.int32) * 1000 + blocks % 3, labels)
            write_png(gt / f"{stem}_gtFine_instanceIds.png", instances.astype(np.uint16))
            write_png(gt / f"{stem}_gtFine_color.png", colours[labels])
            if train_ids:
                write_png(gt / f"{stem}_gtFine_labelTrainIds.png", LABEL_ID_TO_TRAIN_ID[labels])
    return out


def write_ade20k(out: Path, samples: int, rng: np.random.Generator) -> Path:
    """ADEChallengeData2016/{images,annotations}/{training,validation}: 0..150 maps."""
    root = out / "ADEChallengeData2016"
    for split, prefix in (("training", "train"), ("validation", "val")):
        for k in range(samples):
            stem = f"ADE_{prefix}_{k + 1:08d}"
            write_image(root / "images" / split / f"{stem}.jpg", rng, 32, 48)
            write_png(root / "annotations" / split / f"{stem}.png",
                      value_blocks(32, 48, range(151), offset=96 * k).astype(np.uint8))
    (root / "sceneCategories.txt").write_text("".join(f"ADE_train_{k + 1:08d} street\n" for k in range(samples)))
    return root


def write_cocostuff(out: Path, samples: int, rng: np.random.Generator, train_ids: bool) -> Path:
    """images/ and annotations/ of {train2017,val2017}: ids 0..181 and 255 (unlabeled)."""
    stored = [*range(len(COCO_STUFF_182_CLASSES)), 255]
    for split in ("train2017", "val2017"):
        for k in range(samples):
            stem = f"{(9 if split == 'val2017' else 1) * 1000 + k:012d}"
            write_image(out / "images" / split / f"{stem}.jpg", rng, 32, 48)
            labels = value_blocks(32, 48, stored, offset=96 * k).astype(np.uint8)
            labels[0, :] = 255  # an unannotated pixel row in every map: the 1-based-maps probe looks for 255
            write_png(out / "annotations" / split / f"{stem}.png", labels)
            if train_ids:
                write_png(out / "annotations" / split / f"{stem}_labelTrainIds.png", ID_TO_TRAIN_ID[labels])
    return out


def write_sbd_mat(path: Path, segmentation: np.ndarray) -> None:
    """SBD's cls/<name>.mat: a GTcls struct with Segmentation, Boundaries and CategoriesPresent."""
    from scipy.io import savemat

    path.parent.mkdir(parents=True, exist_ok=True)
    present = np.unique(segmentation[segmentation > 0]).astype(np.uint8)
    boundaries = np.empty((20, 1), dtype=object)  # a cell of one (sparse) edge map per class
    for row in range(20):
        boundaries[row, 0] = np.zeros((0, 0), dtype=np.uint8)
    savemat(str(path), {"GTcls": {"Segmentation": segmentation.astype(np.uint8), "Boundaries": boundaries,
                                  "CategoriesPresent": present}})


def write_voc_sbd(out: Path, rng: np.random.Generator) -> Path:
    """VOCdevkit/VOC2012 (palette PNGs with 255 borders) and benchmark_RELEASE/dataset (.mat)."""
    voc, sbd = out / "VOCdevkit" / "VOC2012", out / "benchmark_RELEASE" / "dataset"
    palette = default_palette(256)
    every = sorted({*VOC_TRAIN, *VOC_VAL, *SBD_TRAIN, *SBD_VAL})
    for k, name in enumerate(every):
        write_image(voc / "JPEGImages" / f"{name}.jpg", rng, 24, 32)
        write_image(sbd / "img" / f"{name}.jpg", rng, 24, 32)
        if name in VOC_TRAIN or name in VOC_VAL:  # VOC's map: classes 0..20 with a 255 border
            labels = value_blocks(24, 32, range(21), offset=5 * k).astype(np.uint8)
            labels[0, :] = 255
            write_png(voc / "SegmentationClass" / f"{name}.png", labels, palette)
        if name in SBD_TRAIN or name in SBD_VAL:  # SBD's: other classes, no border
            write_sbd_mat(sbd / "cls" / f"{name}.mat", value_blocks(24, 32, range(21), offset=11 + 3 * k))
    lists = voc / "ImageSets" / "Segmentation"
    lists.mkdir(parents=True, exist_ok=True)
    for split, names in (("train", VOC_TRAIN), ("val", VOC_VAL), ("trainval", VOC_TRAIN + VOC_VAL)):
        (lists / f"{split}.txt").write_text("\n".join(names) + "\n")
    for split, names in (("train", SBD_TRAIN), ("val", SBD_VAL)):
        (sbd / f"{split}.txt").write_text("\n".join(names) + "\n")
    return out


def write_facades(out: Path, samples: int, rng: np.random.Generator) -> Path:
    """pix2pix's datasets/facades/{train,val,test}/<n>.jpg: each image the photo (A, left) and its
    label rendering (B, right) side by side, 2W wide; the official run trains BtoA (labels -> photo)."""
    palette = default_palette(12)  # the CMP facade labels' 12 classes, as flat colours
    for split in ("train", "val", "test"):
        for k in range(samples):
            photo = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
            labels = palette[value_blocks(32, 32, range(12), offset=5 * k)]
            path = out / split / f"{k + 1}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.concatenate([photo, labels], axis=1)).save(path, quality=95)
    return out


def write_horse2zebra(out: Path, samples: int, rng: np.random.Generator) -> Path:
    """CycleGAN's datasets/horse2zebra/{trainA,trainB,testA,testB}/<synset>_<n>.jpg; B holds one image
    more than A, as the published domains differ in size (trainA 1067, trainB 1334)."""
    for split in ("train", "test"):
        for domain, synset, count in (("A", HORSE_SYNSET, samples), ("B", ZEBRA_SYNSET, samples + 1)):
            for k in range(count):
                write_image(out / f"{split}{domain}" / f"{synset}_{10 * k + 1}.jpg", rng, 32, 32)
    return out


# A shipped config that reads each layout (none reads COCO-Stuff), for the printed instructions, and
# what else a first try on a fake tree sets (no ImageNet weights file needed for a smoke run)
CONFIG_OF = {"cityscapes": "configs/segmentation/deeplabv3plus_r50_cityscapes.yaml",
             "ade20k": "configs/segmentation/deeplabv3plus_r50_ade20k.yaml",
             "voc_sbd": "configs/segmentation/deeplabv3plus_r50_voc_aug.yaml",
             "facades": "projects/pix2pix/configs/pix2pix_facades.yaml",
             "horse2zebra": "projects/cyclegan/configs/cyclegan_horse2zebra.yaml"}
SMOKE_OVERRIDES = {"cityscapes": "task.model.encoder_weights=null", "ade20k": "task.model.encoder_weights=null",
                   "voc_sbd": "task.model.encoder_weights=null"}


def root_overrides(layout: str, root: str | os.PathLike) -> list[str]:
    """The overrides pointing a config's training data at the tree `write_fixture_tree` returned
    (its val section reads the same roots through ${data.train.dataset.root}). VOC + SBD has two
    roots: VOCdevkit/VOC2012 and benchmark_RELEASE beside it."""
    if layout == "voc_sbd":
        return [f"data.train.dataset.root={Path(root) / 'VOCdevkit' / 'VOC2012'}",
                f"data.train.dataset.sbd_root={Path(root) / 'benchmark_RELEASE'}"]
    return [f"data.train.dataset.root={root}"]


def write_fixture_tree(layout: str, out: str | os.PathLike, samples: int = 3, seed: int = 0,
                       train_ids: bool = False) -> Path:
    """Write a small tree in `layout` (see `write_tree`) under `out`, which must be new, empty, or a
    fixture tree this function wrote (its MARKER lists the files): the fixture uses the published
    file names, so writing into a folder holding the real dataset would replace real images and
    label maps. The tree is written in a sibling temporary folder first and moved in when complete:
    a failure leaves `out` as it was. A previous fixture tree's files are replaced, nothing else."""
    out = Path(os.path.expanduser(os.fspath(out)))
    previous = fixture_files(out)
    refuse_foreign_folder("fixture folder", out, lambda path: path.relative_to(out).as_posix() in previous,
                          advice="write the fixture into a new or empty folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        root = write_tree(layout, staging, samples, seed, train_ids)
        written = sorted(path.relative_to(staging).as_posix() for path in staging.rglob("*") if path.is_file())
        for name in previous:
            (out / name).unlink(missing_ok=True)
        for name in written:
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / name, out / name)
        (out / MARKER).write_text("\n".join([MARKER_HEADER, *written]) + "\n", encoding="utf-8")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out / root.relative_to(staging)


def fixture_files(out: Path) -> set[str]:
    """The files (relative, posix) a previous `write_fixture_tree` wrote into `out`, its marker
    included; empty when `out` holds no marker."""
    marker = out / MARKER
    if not marker.is_file():
        return set()
    lines = marker.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0] != MARKER_HEADER:
        return set()
    return {MARKER, *lines[1:]}


def write_tree(layout: str, out: Path, samples: int, seed: int, train_ids: bool) -> Path:
    """Write a small tree in `layout` (one of LAYOUTS) under `out`, `samples` per split (VOC + SBD:
    its fixed names); `train_ids`: also the converters' *_labelTrainIds.png (Cityscapes, COCO-Stuff).
    Returns the folder a config's `root` points at (voc_sbd: the folder holding VOCdevkit/ and
    benchmark_RELEASE/; facades and horse2zebra: `out`, holding the split folders)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    out, rng = Path(out), np.random.default_rng(seed)
    if layout == "cityscapes":
        return write_cityscapes(out, samples, rng, train_ids)
    if layout == "ade20k":
        return write_ade20k(out, samples, rng)
    if layout == "cocostuff":
        return write_cocostuff(out, samples, rng, train_ids)
    if layout == "facades":
        return write_facades(out, samples, rng)
    if layout == "horse2zebra":
        return write_horse2zebra(out, samples, rng)
    return write_voc_sbd(out, rng)
