"""tools/check_dataset.py on image folders with planted faults, and on a clean one."""

import json

import cv2
import numpy as np
from PIL import Image

from framework.analysis.dataset_scan import class_totals, scan
from framework.data.base import SegmentationDataset
from framework.data.folder import read_index_mask
from framework.errors import DataError
from support import REPO, call_tool, run_tool

CLASSES = ["background", "circle", "rectangle", "triangle"]


def make_folder(root, faults=False):
    """Six 24x32 samples; sample i has class i % 4 in its top rows and an ignored corner."""
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    rng = np.random.default_rng(0)
    for i in range(6):
        cv2.imwrite(str(root / "images" / f"s{i}.png"), rng.integers(0, 256, (24, 32, 3), dtype=np.uint8))
        mask = np.zeros((24, 32), np.uint8)
        mask[:8] = i % 4
        mask[20:, :4] = 255
        Image.fromarray(mask).save(root / "masks" / f"s{i}.png")
    if faults:
        (root / "images" / "s1.png").write_bytes(b"not an image")
        mask = np.zeros((24, 32), np.uint8)
        mask[0, 0] = 7
        Image.fromarray(mask).save(root / "masks" / "s2.png")
        colours = np.zeros((24, 32, 3), np.uint8)
        colours[:5] = (128, 0, 0)  # the palette's colour of class 1
        Image.fromarray(colours).save(root / "masks" / "s3.png")
        Image.fromarray(np.zeros((20, 32), np.uint8)).save(root / "masks" / "s4.png")
    config = root / "config.yaml"
    config.write_text(f"_base_: {REPO}/configs/segmentation/unet_shapes.yaml\n"
                      f"data:\n  train:\n    dataset: {{type: ImageMaskFolder, root: {root}, classes: {CLASSES}}}\n")
    return config


def test_names_every_planted_fault_and_exits_non_zero(tmp_path):
    config = make_folder(tmp_path / "data", faults=True)
    result = run_tool("check_dataset", "--config", config, "--json", tmp_path / "report.json",
                      "--convert-rgb-masks", tmp_path / "converted")  # a real process: its exit status
    assert result.returncode == 1
    root = tmp_path / "data"
    lines = result.stdout.splitlines()
    expected = [f"{root}/images/s1.png: cannot read image (missing, corrupt or not an image)", f"{root}/masks/s2.png: mask values [7] outside [0, 4)",
                f"{root}/masks/s3.png: RGB colour mask", f"{root}/masks/s4.png: mask is 20x32 but its image is 24x32"]
    for start in expected:
        assert any(line.startswith(start) for line in lines), start
    assert "(0, 0, 0)=background, (128, 0, 0)=circle" in result.stdout and "--convert-rgb-masks" in result.stdout
    assert "4 problem(s)" in result.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["samples"] == 6 and len([p for p in report["problems"] if not p.startswith("  ")]) == 4
    converted = read_index_mask(str(tmp_path / "converted" / "s3.png"))  # loads as a class-index mask
    assert converted.shape == (24, 32) and (converted[:5] == 1).all() and (converted[5:] == 0).all()


def test_duplicate_names_and_all_ignored_masks_are_listed_with_the_other_problems(tmp_path):
    config = make_folder(tmp_path / "data", faults=True)
    root = tmp_path / "data"
    cv2.imwrite(str(root / "images" / "s0.jpg"), np.zeros((24, 32, 3), np.uint8))  # s0.png and s0.jpg
    Image.fromarray(np.full((24, 32), 255, np.uint8)).save(root / "masks" / "s5.png")
    result = call_tool("check_dataset", "--config", config)
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    duplicate = [line for line in lines if " are named s0; keep one" in line]
    assert len(duplicate) == 1 and duplicate[0].startswith(f"{root / 'images'}: both s0.")
    assert f"{root}/masks/s5.png: every pixel is ignore_index 255" in result.stdout
    assert f"{root}/masks/s2.png: mask values [7] outside [0, 4)" in result.stdout  # the others still listed
    assert "6 problem(s)" in result.stdout


def test_check_dataset_refuses_a_negative_worker_count(tmp_path):
    result = call_tool("check_dataset", "--config", make_folder(tmp_path / "data"), "--workers", "-1")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "--workers" in result.stderr and "got -1" in result.stderr


def test_a_clean_folder_exits_zero_with_the_class_table(tmp_path):
    config = make_folder(tmp_path / "data")
    result = call_tool("check_dataset", "--config", config, "--json", tmp_path / "report.json")
    assert result.returncode == 0, result.stderr
    assert "no problems found" in result.stdout
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines() if line.split()[:1] and line.split()[0] in CLASSES}
    # Per sample 8 x 32 = 256 pixels of class i % 4, the other rows background but a 4 x 4 ignored corner.
    background = 6 * (24 * 32 - 16) - 4 * 256
    assert [int(rows[c][1]) for c in CLASSES] == [background, 2 * 256, 256, 256]
    report = json.loads((tmp_path / "report.json").read_text())
    assert [r["images"] for r in report["classes"]] == [6, 2, 1, 1]
    assert report["sizes"]["distinct_sizes"] == 1 and report["sizes"]["max_height"] == 24


def test_a_missing_split_is_one_line(tmp_path):
    config = make_folder(tmp_path / "data")
    result = call_tool("check_dataset", "--config", config, "--split", "test")
    assert result.returncode == 2 and result.stderr.startswith("error: data.test")


def test_every_problem_line_and_the_totals_of_the_readable_samples(tmp_path):
    """In this process (the test above runs a real one): each problem line whole, and the class
    totals of the samples after an unreadable one still counted."""
    config = make_folder(tmp_path / "data", faults=True)
    root = tmp_path / "data"
    rgba = np.zeros((24, 32, 4), np.uint8)
    rgba[..., 3] = 255
    rgba[:3] = (128, 0, 0, 255)  # the palette's colour of class 1, with an alpha channel
    Image.fromarray(rgba).save(root / "masks" / "s5.png")
    (root / "masks" / "s0.png").write_bytes(b"not a png")
    result = call_tool("check_dataset", "--config", config, "--json", tmp_path / "report.json")
    assert result.returncode == 1
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["problems"] == [
        f"{root}/masks/s0.png: cannot read mask (cannot identify image file '{root}/masks/s0.png')",
        f"{root}/images/s1.png: cannot read image (missing, corrupt or not an image)",
        f"{root}/masks/s2.png: mask values [7] outside [0, 4) (ignore_index 255)",
        f"{root}/masks/s3.png: RGB colour mask (2 colours); masks must hold class indices",
        f"  colours used: (0, 0, 0)=background, (128, 0, 0)=circle; convert with python tools/check_dataset.py "
        f"--config {config} --convert-rgb-masks DIR",
        f"{root}/masks/s4.png: mask is 20x32 but its image is 24x32",
        f"{root}/masks/s5.png: RGB colour mask (2 colours); masks must hold class indices",
        f"  colours used: (0, 0, 0)=background, (128, 0, 0)=circle; convert with python tools/check_dataset.py "
        f"--config {config} --convert-rgb-masks DIR",
    ]
    # s1's mask (class 1 rows: its image is unreadable, its mask still counts), s2 (zeros and one
    # 7), s4 (zeros); s0's mask is unreadable, s3 and s5 are colour masks
    images = {row["class"]: row["images"] for row in report["classes"]}
    assert images == {"background": 3, "circle": 1, "rectangle": 0, "triangle": 0}


class _GeneratedMasks(SegmentationDataset):
    """No files: check_dataset reads samples through load_sample."""

    def __init__(self, masks):
        super().__init__(classes=["a", "b", "c"])
        self.masks = masks

    def __len__(self):
        return len(self.masks)

    def load_sample(self, index):
        if self.masks[index] is None:
            raise DataError(f"generated sample {index} failed")
        return np.zeros((*self.masks[index].shape, 3), np.uint8), self.masks[index], f"g{index}"


def test_generated_samples_report_values_below_zero_and_one_past_the_last_class():
    masks = [np.array([[0, 3], [-1, 1]], np.int64), np.array([[255, 255], [255, 255]], np.int64),
             np.array([[2, 0], [0, 0]], np.int64), None]
    records = scan(_GeneratedMasks(masks))
    assert [r.name for r in records] == ["0", "1", "2", "3"]
    assert records[3].problems == ["generated sample 3 failed"] and records[3].counts is None
    assert records[0].problems == ["_GeneratedMasks[0]: mask values [3, -1] outside [0, 3) (ignore_index 255)"]
    assert records[1].problems == ["_GeneratedMasks[1]: every pixel is ignore_index 255: the sample adds nothing to "
                                   "the loss or the metrics"]
    assert records[2].problems == [] and records[2].counts.tolist() == [3, 0, 1] and records[2].size == (2, 2)
    pixels, image_pixels, images = class_totals(records, 3)
    assert images.tolist() == [2, 1, 1] and pixels.dtype == np.int64  # class 2: one pixel in one image


def test_a_voc_folder_with_palette_masks_is_counted_by_palette_index(tmp_path):
    """VOC's masks are palette PNGs: their pixels are the class indices, whatever the colours."""
    for sub in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation"):
        (tmp_path / sub).mkdir(parents=True)
    mask = np.zeros((8, 8), np.uint8)
    mask[:2] = 15  # person
    mask[7] = 255  # void
    cv2.imwrite(str(tmp_path / "JPEGImages" / "a.jpg"), np.zeros((8, 8, 3), np.uint8))
    png = Image.fromarray(mask, mode="P")
    png.putpalette([0, 0, 0] * 256)  # all black: only the indices tell the classes apart
    png.save(tmp_path / "SegmentationClass" / "a.png")
    (tmp_path / "ImageSets/Segmentation/train.txt").write_text("a\n")
    config = tmp_path / "config.yaml"
    config.write_text(f"_base_: {REPO}/configs/segmentation/unet_voc.yaml\n"
                      f"data:\n  train:\n    dataset: {{root: {tmp_path}}}\n")
    result = call_tool("check_dataset", "--config", config, "--json", tmp_path / "report.json")
    assert result.returncode == 0, result.stdout + result.stderr
    pixels = {row["class"]: row["pixels"] for row in json.loads((tmp_path / "report.json").read_text())["classes"]}
    assert pixels["person"] == 16 and pixels["background"] == 40 and sum(pixels.values()) == 56


CYCLEGAN_CONFIG = REPO / "projects/cyclegan/configs/cyclegan_shapes.yaml"
PIX2PIX_CONFIG = REPO / "projects/pix2pix/configs/pix2pix_shapes.yaml"


def unpaired_folders(root, broken_in=None):
    """trainA with 3 images, trainB with 2 (20x24), one of `broken_in`'s replaced by a text file."""
    rng = np.random.default_rng(1)
    for domain, count in (("A", 3), ("B", 2)):
        (root / f"train{domain}").mkdir(parents=True)
        for i in range(count):
            cv2.imwrite(str(root / f"train{domain}" / f"{domain.lower()}{i}.png"),
                        rng.integers(0, 256, (20, 24, 3), dtype=np.uint8))
    if broken_in:
        (root / f"train{broken_in}" / f"{broken_in.lower()}1.png").write_bytes(b"not an image")
    return [f"data.train.dataset={{type: UnpairedImageFolders, root: {root}}}"]


def test_a_broken_file_in_train_a_is_named_on_one_line(tmp_path):
    report = tmp_path / "report.json"
    result = call_tool("check_dataset", "--config", CYCLEGAN_CONFIG, "--json", report,
                       *unpaired_folders(tmp_path / "data", broken_in="A"))
    assert result.returncode == 1, result.stderr
    broken = tmp_path / "data" / "trainA" / "a1.png"
    assert f"{broken}: cannot read image" in result.stdout
    assert "data.train: UnpairedImageFolders, A 3 images, B 2 images" in result.stdout
    assert "1 problem(s):" in result.stdout
    problems = json.loads(report.read_text())["problems"]
    assert len(problems) == 1 and problems[0].startswith(f"{broken}: ")
    assert json.loads(report.read_text())["images"] == 5  # every image of A and of B once


def test_clean_unpaired_folders_exit_zero_and_a_broken_b_is_found_too(tmp_path):
    clean = call_tool("check_dataset", "--config", CYCLEGAN_CONFIG, *unpaired_folders(tmp_path / "clean"))
    assert clean.returncode == 0, clean.stderr + clean.stdout
    assert "no problems found" in clean.stdout and "min_height 20" in clean.stdout
    # B is read beyond A's count too: the only broken file is B's second of two
    broken = call_tool("check_dataset", "--config", CYCLEGAN_CONFIG, *unpaired_folders(tmp_path / "b", "B"))
    assert broken.returncode == 1 and f"{tmp_path / 'b' / 'trainB' / 'b1.png'}: cannot read image" in broken.stdout


def test_paired_and_single_image_datasets_are_checked(tmp_path):
    pairs = call_tool("check_dataset", "--config", PIX2PIX_CONFIG, "data.train.dataset.num_samples=3",
                      "data.train.dataset.size=24")
    assert pairs.returncode == 0, pairs.stderr
    assert "SyntheticPairs, 3 pairs" in pairs.stdout and "max_width 24" in pairs.stdout
    images = call_tool("check_dataset", "--config", REPO / "projects/dcgan/configs/dcgan_shapes.yaml",
                       "data.train.dataset.num_samples=3")
    assert images.returncode == 0, images.stderr
    assert "ShapeImages, 3 images" in images.stdout


def test_a_pair_whose_halves_differ_in_size_is_named(tmp_path):
    from framework.analysis.image_scan import inspect_image
    from framework.data.images import PairedImageDataset

    class Pairs(PairedImageDataset):
        def __len__(self):
            return 2

        def load_pair(self, index):
            target = np.zeros((8, 8 + index, 3), np.uint8)  # pair 1's target is one pixel wider
            return np.zeros((8, 8, 3), np.uint8), target, f"p{index}"

    assert inspect_image(Pairs(), "pair", 0).problem is None
    assert inspect_image(Pairs(), "pair", 1).problem == "p1: input is 8x8 but its target is 8x9"


def test_convert_rgb_masks_is_refused_on_a_dataset_without_masks(tmp_path):
    result = call_tool("check_dataset", "--config", CYCLEGAN_CONFIG, "--convert-rgb-masks", tmp_path / "out",
                       "data.train.dataset.num_samples=2")
    assert result.returncode == 2
    assert result.stderr.startswith("error: --convert-rgb-masks: TwoStyleShapes holds no class masks")
    assert not (tmp_path / "out").exists()
