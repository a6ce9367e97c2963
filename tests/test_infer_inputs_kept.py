"""tools/infer.py never writes over a file it reads (an --output that is, holds, lies above or links to
the inputs is refused before anything is written), and a seed names one image of an unconditional
GAN at any batch size."""

import os

import cv2
import numpy as np
import pytest

from framework.inference.noise import item_noise, noise_seed
from support import call_tool


def write_images(folder, names, size=(20, 24)):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name in names:
        cv2.imwrite(str(folder / name), rng.integers(0, 256, (*size, 3), dtype=np.uint8))


def snapshot(root):
    """Every file under `root` (links not followed) -> its bytes."""
    return {path: path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file() and not path.is_symlink()}


def assert_refused(result, output, read):
    assert result.returncode == 2, result.stdout + result.stderr
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and line.startswith(f"error: --output {output}: "), line
    assert str(read) in line, line


def test_an_output_folder_that_is_the_input_folder_is_refused_and_the_inputs_kept(pix2pix_run, tmp_path):
    write_images(tmp_path / "in", ["a.png", "b.png"])
    before = snapshot(tmp_path)
    result = call_tool("infer", *pix2pix_run.args(), "--input", tmp_path / "in", "--output", tmp_path / "in")
    assert_refused(result, tmp_path / "in", tmp_path / "in")
    assert "the same folder as --input" in result.stderr
    assert snapshot(tmp_path) == before


def test_a_symlink_to_the_input_folder_is_refused(pix2pix_run, tmp_path):
    write_images(tmp_path / "in", ["a.png"])
    os.symlink(tmp_path / "in", tmp_path / "link")
    before = snapshot(tmp_path)
    result = call_tool("infer", *pix2pix_run.args(), "--input", tmp_path / "in", "--output", tmp_path / "link")
    assert_refused(result, tmp_path / "link", tmp_path / "in")
    assert snapshot(tmp_path) == before


def test_an_output_folder_beside_a_single_input_file_is_refused(pix2pix_run, tmp_path):
    write_images(tmp_path / "in", ["a.png"])
    before = snapshot(tmp_path)
    result = call_tool("infer", *pix2pix_run.args(), "--input", tmp_path / "in" / "a.png", "--output", tmp_path / "in")
    assert_refused(result, tmp_path / "in", tmp_path / "in" / "a.png")
    assert "holds --input" in result.stderr
    assert snapshot(tmp_path) == before


def test_an_output_inside_the_inputs_that_holds_some_of_them_is_refused(pix2pix_run, tmp_path):
    """A recursive glob reads in/sub/b.png; --output in/sub would write b.png over it."""
    write_images(tmp_path / "in", ["a.png"])
    write_images(tmp_path / "in" / "sub", ["b.png"])
    before = snapshot(tmp_path)
    result = call_tool("infer", *pix2pix_run.args(), "--input", f"{tmp_path}/in/**/*.png",
                       "--output", tmp_path / "in" / "sub")
    assert_refused(result, tmp_path / "in" / "sub", tmp_path / "in" / "sub" / "b.png")
    assert snapshot(tmp_path) == before


def test_an_output_above_the_inputs_whose_results_would_land_on_them_is_refused(unet_run, tmp_path):
    """Segmentation writes <output>/masks/<name>.png: the input folder out/masks is overwritten from out."""
    write_images(tmp_path / "out" / "masks", ["a.png"])
    before = snapshot(tmp_path)
    result = call_tool("infer", *unet_run.args(), "--input", tmp_path / "out" / "masks", "--output", tmp_path / "out")
    assert_refused(result, tmp_path / "out", tmp_path / "out" / "masks" / "a.png")
    assert f"would write {tmp_path / 'out' / 'masks' / 'a.png'}" in result.stderr
    assert snapshot(tmp_path) == before


def test_a_result_file_that_links_to_an_input_is_refused(pix2pix_run, tmp_path):
    write_images(tmp_path / "in", ["a.png"])
    (tmp_path / "out").mkdir()
    os.symlink(tmp_path / "in" / "a.png", tmp_path / "out" / "a.png")  # writing out/a.png writes in/a.png
    before = snapshot(tmp_path)
    result = call_tool("infer", *pix2pix_run.args(), "--input", tmp_path / "in", "--output", tmp_path / "out")
    assert_refused(result, tmp_path / "out", tmp_path / "in" / "a.png")
    assert snapshot(tmp_path) == before


def test_a_distinct_output_folder_still_works_and_leaves_the_inputs_alone(pix2pix_run, tmp_path):
    write_images(tmp_path / "data" / "in", ["a.png", "b.png"])
    before = snapshot(tmp_path / "data" / "in")
    # beside the inputs, and above them where no result lands on one: both fine
    for output in (tmp_path / "data" / "results", tmp_path / "data"):
        result = call_tool("infer", *pix2pix_run.args(), "--input", tmp_path / "data" / "in", "--output", output)
        assert result.returncode == 0, result.stderr
        assert sorted(p.name for p in output.glob("*.png")) == ["a.png", "b.png"]
    assert snapshot(tmp_path / "data" / "in") == before


def test_a_run_folder_holding_the_config_and_checkpoint_takes_results(unet_run, tmp_path):
    """Only the data are inputs a folder may not hold: predictions beside the run's config.yaml are fine."""
    import shutil

    shutil.copytree(unet_run.work_dir, tmp_path / "run")
    config, checkpoint = tmp_path / "run" / "config.yaml", tmp_path / "run" / unet_run.checkpoint.relative_to(
        unet_run.work_dir)
    write_images(tmp_path / "in", ["a.png"])
    before = snapshot(tmp_path)
    result = call_tool("infer", "--config", config, "--checkpoint", checkpoint, "--input", tmp_path / "in",
                       "--output", tmp_path / "run")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "run" / "masks" / "a.png").exists()
    assert all(snapshot(tmp_path)[path] == data for path, data in before.items())


def read_samples(folder, count):
    return [cv2.imread(str(folder / f"sample_{i:04d}.png")) for i in range(count)]


def test_a_seed_names_each_unconditional_sample_at_any_batch_size_and_count(dcgan_run, tmp_path):
    for label, batch, num in (("one", 1, 5), ("four", 4, 5), ("three_of_them", 4, 3)):
        result = call_tool("infer", *dcgan_run.args(), "--output", tmp_path / label, "--num", num, "--seed", "7",
                           "--batch-size", batch)
        assert result.returncode == 0, result.stderr
    one, four, three = read_samples(tmp_path / "one", 5), read_samples(tmp_path / "four", 5), \
        read_samples(tmp_path / "three_of_them", 3)
    for i in range(5):
        assert np.array_equal(one[i], four[i]), f"sample {i}: batch size 1 and 4 differ"
    for i in range(3):
        assert np.array_equal(three[i], one[i]), f"sample {i}: --num 3 and 5 differ"
    assert not np.array_equal(one[0], one[1])
    result = call_tool("infer", *dcgan_run.args(), "--output", tmp_path / "other", "--num", "1", "--seed", "8")
    assert result.returncode == 0, result.stderr
    assert not np.array_equal(read_samples(tmp_path / "other", 1)[0], one[0])


def test_noise_seeds_do_not_collide_where_seed_plus_index_would():
    seeds = {noise_seed(seed, draw, item) for seed in range(4) for draw in range(4) for item in range(4)}
    assert len(seeds) == 64
    assert noise_seed(0, 0, "a") != noise_seed(0, 0, 0) != noise_seed(0, 1, 0)
    rows = item_noise((3,), 5, 2, ["x", "y", "x"])
    assert rows.shape == (3, 3) and np.array_equal(rows[0], rows[2]) and not np.array_equal(rows[0], rows[1])


@pytest.mark.parametrize("seed", [0, 2**63 - 1])
def test_noise_seed_takes_every_allowed_seed(seed):
    assert 0 <= noise_seed(seed, 0, 0) < 2**63
