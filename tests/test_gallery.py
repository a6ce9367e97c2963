"""The docs' gallery: the committed pictures are what docs/gallery.md says they are, and the drawing
functions of docs/make_gallery.py give the documented grids and curves for a tiny run (the shipped
configs themselves are trained only by the script, by hand: minutes each)."""

import importlib.util
import json
import sys

import pytest
from PIL import Image

from support import REPO

DOCS = REPO / "docs"
GALLERY = DOCS / "gallery"


def docs_module(name: str):
    """A module of docs/ (no package: mkdocs would publish an __init__.py's folder as pages)."""
    saved = sys.path[:], sys.dont_write_bytecode  # make_gallery sets both for itself: not for the whole suite
    sys.dont_write_bytecode = True  # no docs/__pycache__: mkdocs would copy it into the site
    try:
        spec = importlib.util.spec_from_file_location(name, DOCS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path[:], sys.dont_write_bytecode = saved
    return module


def manifest() -> dict:
    return json.loads((GALLERY / "manifest.json").read_text())


def test_every_gallery_image_exists_loads_and_has_the_documented_size():
    page = (DOCS / "gallery.md").read_text()
    images = manifest()["images"]
    assert images, "docs/gallery/manifest.json lists no image: run python docs/make_gallery.py"
    for entry in images:
        path = DOCS / entry["file"]
        assert path.is_file() and 0 < path.stat().st_size <= 200 * 1024, (path, path.stat().st_size)
        with Image.open(path) as image:
            image.load()
            assert image.size == (entry["width"], entry["height"]), path
        assert f"]({entry['file']})" in page, f"docs/gallery.md does not show {entry['file']}"
        assert f"{entry['width']} x {entry['height']} px" in page
        assert not entry.get("quick"), f"{entry['file']}: a --quick try-out was committed"
    on_disk = {p.relative_to(DOCS).as_posix() for p in GALLERY.iterdir() if p.suffix in (".png", ".jpg")}
    assert on_disk == {entry["file"] for entry in images}, "an image in docs/gallery/ the page does not list"


def test_the_page_states_seed_commit_command_and_the_measured_regeneration_time():
    text = (DOCS / "gallery.md").read_text()
    total = manifest()["total"]
    assert total and not total["quick"], "no whole regeneration measured: run python docs/make_gallery.py"
    page = docs_module("gallery_page")  # the measured figures, as the page writes them
    assert f"**{page.minutes(total['seconds'])}**" in text and page.minutes(total["cpu_seconds"]) in text
    for entry in manifest()["images"]:
        assert entry["commit"] in text and entry["command"] in text
    kinds = {(e["name"], e["kind"]) for e in manifest()["images"]}
    script = docs_module("make_gallery")
    for name, *_ in script.TRAINED:  # every config the script trains is on the page
        assert {(name, "samples"), (name, "curves")} <= kinds, name
    if any(e["section"] == "Semantic synthesis" for e in manifest()["images"]):  # drawn from a comparison's runs
        for name, *_ in script.SYNTHESIS:
            assert {(name, "samples"), (name, "curves")} <= kinds, name
        assert {f"compare_{metric}" for metric in script.COMPARED} <= {name for name, _ in kinds}


def test_grids_and_curves_of_a_segmenter_and_a_translator(unet_run, pix2pix_run, tmp_path):
    draw = docs_module("gallery_draw")
    for run, columns in ((unet_run, ["image", "ground truth", "prediction"]), (pix2pix_run, ["input", "output", "target"])):
        path, drawn = draw.draw_samples(run.work_dir, tmp_path / f"{run.work_dir.name}_samples", rows=2)
        assert drawn == columns
        with Image.open(path) as image:  # 32 x 32 samples enlarged x4, spaced by GAP, under a header
            tile = 32 * 4
            assert image.size == (3 * tile + 2 * draw.GAP, draw.HEADER + 2 * tile + draw.GAP)
        path, metric, best = draw.draw_curves(run.work_dir, tmp_path / f"{run.work_dir.name}_curves")
        assert metric == {"unet": "mIoU", "pix2pix": "PSNR"}[run.work_dir.name.rstrip("0123456789")]
        assert best is not None and best[0] > 0
        with Image.open(path) as image:
            assert image.size == (800, 300)


def test_a_run_without_a_best_metric_is_drawn_with_its_first_number_the_way_its_name_improves(tmp_path):
    draw = docs_module("gallery_draw")
    records = [{"iter": 0, "epoch": 0, "L1_ab": 0.5, "PSNR_ab": 8.0}, {"iter": 100, "epoch": 1, "L1_ab": 0.2},
               {"iter": 200, "epoch": 2, "L1_ab": 0.3}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    name, mode, curve = draw.evaluated_metric(tmp_path, {"train": {"best_metric": None, "best_mode": "auto"}})
    assert (name, mode, curve) == ("L1_ab", "min", [(0, 0.5), (100, 0.2), (200, 0.3)])
    assert draw.evaluated_metric(tmp_path, {"train": {"best_metric": "PSNR_ab", "best_mode": "max"}})[:2] == ("PSNR_ab", "max")
    (tmp_path / "metrics.jsonl").unlink()
    assert draw.evaluated_metric(tmp_path, {"train": {"best_metric": None, "best_mode": "auto"}}) == (None, "max", [])


def test_the_curves_show_each_networks_total_loss_not_its_parts():
    draw = docs_module("gallery_draw")
    cyclegan = ["train/loss_g", "train/loss_g_ab", "train/loss_cycle_a", "train/loss_d_a", "train/loss_d_b",
                "train/loss_d_fake_a", "train/loss_d_real_b", "train/loss_d_r1_a", "train/lr"]
    assert draw.loss_tags(cyclegan) == ["train/loss_g", "train/loss_d_a", "train/loss_d_b"]
    assert draw.loss_tags(["train/loss_g", "train/loss_d", "train/loss_d_labelmix"]) == ["train/loss_g", "train/loss_d"]
    assert draw.loss_tags(["train/loss", "train/grad_norm"]) == ["train/loss"]


def test_an_image_over_the_limit_as_png_is_written_as_jpeg(tmp_path):
    import numpy as np

    draw = docs_module("gallery_draw")
    noise = np.random.default_rng(0).integers(0, 256, (300, 300, 3), dtype=np.uint8)  # 270 KB raw: no PNG fits
    (tmp_path / "noise.png").write_bytes(b"stale")
    path = draw.save_image(noise, tmp_path / "noise")
    assert path.suffix == ".jpg" and not (tmp_path / "noise.png").exists()
    flat = np.zeros((300, 300, 3), np.uint8)
    assert draw.save_image(flat, tmp_path / "flat").suffix == ".png"
    with pytest.raises(ValueError, match="over 204800 bytes"):
        draw.save_image(np.random.default_rng(1).integers(0, 256, (800, 800, 3), dtype=np.uint8), tmp_path / "big")
