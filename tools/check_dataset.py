"""Check a dataset before training on it (the dataset doctor):

    python tools/check_dataset.py --config CFG [--split train|val|test] [--workers N] [--json FILE]
        [--convert-rgb-masks DIR] [key=value ...]

Reads every sample once and names, per file: unreadable images, colour (RGB) masks and the
colours they use, mask values outside [0, num_classes) other than ignore_index, masks whose
size differs from their image's, and duplicate sample names. Then prints the class pixel
frequencies by class name, the fraction of ignored pixels, image size statistics and the class
weights `weight: auto` would use; for a published layout (Cityscapes, ADE20K, COCO-Stuff, VOC) it
warns when a split's sample count differs from the published one; and it notes
the images read turned by their EXIF orientation (phone photos), whose masks must be drawn on the
image as shown. Exit status 1 when it found a problem, 0 for a clean dataset.

A GAN dataset (single images, input/target pairs, or CycleGAN's two unpaired domains, each image
of A and of B once) is checked for unreadable images, images that are not RGB, and pairs whose
halves differ in size, with the image size statistics.

--convert-rgb-masks DIR writes each colour mask found as an index mask (the dataset's palette
colours become their class ids, other colours ignore_index) into DIR; point the dataset's
`mask_dir` there.
"""

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
from tqdm import tqdm

from framework.analysis.class_weights import METHODS, compute_weights
from framework.analysis.dataset_scan import class_totals, read_mask_raw, scan
from framework.analysis.image_scan import IMAGE_DATASETS, image_counts, image_reads, scan_images
from framework.config import import_custom_modules, load_config, to_plain
from framework.config.rules import integer
from framework.data.base import SegmentationDataset
from framework.data.folder import MAX_NAMES_IN_MESSAGE, ORIENTATIONS, duplicate_names_collected
from framework.data.sources import folders_read_by
from framework.errors import ConfigError
from framework.registry import DATASETS
from framework.runtime.cli import MAX_WORKERS, check_options, given_path, output_file, output_folder, run
from framework.runtime.overwrite import refuse_writing_over_inputs
from framework.visualization.masks import write_index_mask


def parse_args() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, type=given_path, help="YAML config file")
    parser.add_argument("--split", default="train", help="which data section: train, val or test")
    parser.add_argument("--workers", type=int, default=0, help="processes reading the files")
    parser.add_argument("--json", type=output_file, help="also write the report as JSON here")
    parser.add_argument("--convert-rgb-masks", metavar="DIR", type=output_folder, help="write colour masks as index masks here")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    return parser


def build_dataset(config: str, split: str, overrides):
    cfg = load_config(config, overrides)
    import_custom_modules(cfg)
    section = to_plain(cfg)["data"].get(split)
    if not section:
        raise ConfigError(f"data.{split}: the config has no such data section")
    dataset = DATASETS.build(section["dataset"], path=f"data.{split}.dataset")
    if not isinstance(dataset, (SegmentationDataset, *IMAGE_DATASETS)):
        raise ConfigError(f"data.{split}.dataset: {type(dataset).__name__} is neither a segmentation dataset nor "
                          "an image, paired or unpaired image dataset (framework/data); check_dataset does not "
                          "know how to read it")
    return dataset


def colour_names(colours, dataset: SegmentationDataset) -> str:
    by_colour = {tuple(c): name for c, name in zip(dataset.palette, dataset.class_names)}
    return ", ".join(f"{c}={by_colour.get(c, '?')}" for c in colours[:8]) + (" ..." if len(colours) > 8 else "")


def problems_of(records, dataset: SegmentationDataset, config: str) -> list[str]:
    problems = []
    for record in records:
        problems += record.problems
        if record.colours:
            problems.append(f"  colours used: {colour_names(record.colours, dataset)}; convert with "
                            f"python tools/check_dataset.py --config {config} --convert-rgb-masks DIR")
    duplicates = [name for name, n in Counter(r.name for r in records).items() if n > 1]
    if duplicates:
        problems.append(f"duplicate sample names: {', '.join(duplicates[:10])}")
    return problems


def orientation_note(records, dataset: SegmentationDataset) -> str:
    """One line on the images read turned by their EXIF orientation, or ""."""
    turned = [r for r in records if r.orientation != 1]
    if not turned:
        return ""
    shown = ", ".join(f"{Path(dataset.image_path(r.index)).name} ({ORIENTATIONS[r.orientation]})"
                      for r in turned[:MAX_NAMES_IN_MESSAGE]) + (", ..." if len(turned) > MAX_NAMES_IN_MESSAGE else "")
    return (f"note: {len(turned)} image(s) carry an EXIF orientation and are read turned by it, as viewers and "
            f"annotation tools show them: {shown}. Their masks must be drawn on the image as shown; one drawn on "
            "the stored pixels is misaligned, and its size gives it away only when a non-square image is turned "
            "by 90 degrees")


def class_table(records, dataset: SegmentationDataset) -> tuple[list[dict], list[str]]:
    pixels, image_pixels, images = class_totals(records, dataset.num_classes)
    weights = {m: compute_weights(pixels, image_pixels, m) for m in METHODS}
    total = max(int(pixels.sum()), 1)
    rows = [{"class": name, "pixels": int(pixels[c]), "share": float(pixels[c] / total), "images": int(images[c]),
             **{f"weight_{m}": float(weights[m][c]) for m in METHODS}}
            for c, name in enumerate(dataset.class_names)]
    width = max(len("class"), *(len(r["class"]) for r in rows))
    lines = [f"{'class':<{width}}  {'pixels':>12}  {'share':>7}  {'images':>7}  " + "  ".join(f"{m:>16}" for m in METHODS)]
    lines += [f"{r['class']:<{width}}  {r['pixels']:>12}  {r['share']:>7.2%}  {r['images']:>7}  "
              + "  ".join(f"{r[f'weight_{m}']:>16.4f}" for m in METHODS) for r in rows]
    return rows, lines


def published_count_line(dataset: SegmentationDataset, samples: int) -> str:
    """The split's sample count against the published one (a published layout's); a different
    count is a warning, not a problem: a subset is legitimate, a missing folder is not."""
    published = getattr(dataset, "published_count", None)
    if published is None:
        return ""
    split = f"{type(dataset).__name__} {getattr(dataset, 'split', '')}".strip()
    if samples == published:
        return f"{samples} samples: the published count of {split}"
    return (f"warning: {samples} samples, {split} has {published} as published (fine for a subset; otherwise "
            "a folder of the download is missing or was unpacked elsewhere)")


def ignored_fraction(records) -> float:
    ignored = sum(r.ignored for r in records)
    labelled = sum(int(r.counts.sum()) for r in records if r.counts is not None)
    return ignored / max(ignored + labelled, 1)


def size_statistics(records) -> dict:
    sizes = np.array([r.size for r in records if r.size is not None]).reshape(-1, 2)
    if not len(sizes):
        return {}
    stats = {f"{what}_{side}": int(fn(sizes[:, i])) for i, side in enumerate(("height", "width"))
             for what, fn in (("min", np.min), ("median", np.median), ("max", np.max))}
    return {**stats, "distinct_sizes": len({tuple(s) for s in sizes})}


def converted_mask_file(folder: Path, dataset: SegmentationDataset, index: int) -> Path:
    return folder / Path(dataset.mask_path(index)).name


def refuse_writing_over_the_data(args: argparse.Namespace, dataset) -> None:
    """--convert-rgb-masks into the mask folder would replace the only copy of the colour masks."""
    data = [(f"data.{args.split}.dataset", folder) for folder in folders_read_by(dataset)]
    config = [("--config", args.config)]
    if args.convert_rgb_masks and isinstance(dataset, SegmentationDataset):
        folder = Path(args.convert_rgb_masks)
        writes = [converted_mask_file(folder, dataset, index) for index in range(len(dataset))]
        refuse_writing_over_inputs("--convert-rgb-masks", folder, data, writes, other_reads=config)
    if args.json:
        refuse_writing_over_inputs("--json", args.json, data, [args.json], output_is_folder=False, other_reads=config)


def convert_rgb_masks(records, dataset: SegmentationDataset, folder: Path) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    palette = np.array(dataset.palette, dtype=np.uint8)
    converted = 0
    for record in (r for r in records if r.colours):
        colours = read_mask_raw(dataset.mask_path(record.index))
        labels = np.full(colours.shape[:2], dataset.ignore_index, dtype=np.uint8)
        for class_id, colour in enumerate(palette):
            labels[(colours == colour).all(axis=2)] = class_id
        write_index_mask(converted_mask_file(folder, dataset, record.index), labels, palette)
        converted += 1
    return converted


def check_images(dataset, args: argparse.Namespace, duplicates: list[str]) -> int:
    """check_dataset on a GAN dataset: every image read once, its problems listed."""
    if args.convert_rgb_masks:
        raise ConfigError(f"--convert-rgb-masks: {type(dataset).__name__} holds no class masks; the option is for "
                          "a segmentation dataset")
    with progress_bar(len(image_reads(dataset))) as bar:
        records = scan_images(dataset, args.workers, on_record=lambda done: bar.update(1))
    problems = duplicates + [r.problem for r in records if r.problem]
    sizes = size_statistics(records)
    print(f"data.{args.split}: {type(dataset).__name__}, {image_counts(dataset)}")
    if sizes:
        print("image sizes (HxW): " + "  ".join(f"{k} {v}" for k, v in sizes.items()))
    if args.json:
        report = {"split": args.split, "images": len(records), "problems": problems, "sizes": sizes}
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return report_problems(problems)


def progress_bar(total: int):
    return tqdm(total=total, disable=not sys.stdout.isatty(), file=sys.stdout, unit="sample", leave=False)


def report_problems(problems: list[str]) -> int:
    if problems:
        print(f"{len([p for p in problems if not p.startswith('  ')])} problem(s):")
        print("\n".join(problems))
        return 1
    print("no problems found")
    return 0


def main(args: argparse.Namespace) -> int:
    check_options({"--workers": (args.workers, integer(0, max=MAX_WORKERS))})
    with duplicate_names_collected() as duplicates:  # listed with the other problems, not fatal here
        dataset = build_dataset(args.config, args.split, args.overrides)
    refuse_writing_over_the_data(args, dataset)
    if not isinstance(dataset, SegmentationDataset):
        return check_images(dataset, args, duplicates)
    with progress_bar(len(dataset)) as bar:
        records = scan(dataset, args.workers, on_record=lambda done: bar.update(1))
    problems = duplicates + problems_of(records, dataset, args.config)
    rows, table = class_table(records, dataset)
    sizes = size_statistics(records)
    print(f"data.{args.split}: {type(dataset).__name__}, {len(records)} samples, {dataset.num_classes} classes")
    print("\n".join(table))
    ignored = ignored_fraction(records)
    print(f"ignored pixels (ignore_index {dataset.ignore_index}): {ignored:.2%}")
    count_line = published_count_line(dataset, len(records))
    if count_line:
        print(count_line)
    if sizes:
        print("image sizes (HxW): " + "  ".join(f"{k} {v}" for k, v in sizes.items()))
    if args.convert_rgb_masks:
        count = convert_rgb_masks(records, dataset, Path(args.convert_rgb_masks))
        print(f"{count} colour masks written as index masks to {args.convert_rgb_masks}")
    note = orientation_note(records, dataset)
    if note:
        print(note)
    if args.json:
        turned = [{"name": r.name, "exif_orientation": r.orientation} for r in records if r.orientation != 1]
        report = {"split": args.split, "samples": len(records), "problems": problems, "classes": rows, "sizes": sizes,
                  "exif_turned": turned, "ignored_fraction": ignored,
                  "published_count": getattr(dataset, "published_count", None)}
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return report_problems(problems)


if __name__ == "__main__":
    sys.exit(run(main, parse_args()))
