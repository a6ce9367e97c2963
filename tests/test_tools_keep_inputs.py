"""Every tool that writes files refuses, in one line naming both paths and before writing, to write
over a file it reads (framework/runtime/overwrite.py): test.py --show-dir, browse_dataset.py,
check_dataset.py --convert-rgb-masks and --json, print_config.py, export.py, analyze_model.py.
(tools/infer.py: tests/test_infer_inputs_kept.py.)"""

import os
import shutil

import pytest
from test_check_dataset import CLASSES, make_folder

from framework.data.sources import folders_read_by
from support import call_tool


def snapshot(root):
    return {path: path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file() and not path.is_symlink()}


def assert_refused(result, option, output, read):
    assert result.returncode == 2, result.stdout + result.stderr
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and line.startswith(f"error: {option} {output}: "), line
    assert str(read) in line, line


def folder_dataset(root, split="val"):
    return f"data.{split}.dataset={{type: ImageMaskFolder, root: {root}, classes: {CLASSES}}}"


def test_test_show_dir_in_the_image_folder_is_refused_and_a_distinct_one_works(unet_run, tmp_path):
    make_folder(tmp_path / "data")
    before = snapshot(tmp_path / "data")
    common = [*unet_run.args(), "--work-dir", tmp_path / "work", folder_dataset(tmp_path / "data"),
              "data.val.batch_size=2"]
    result = call_tool("test", *common, "--show-dir", tmp_path / "data" / "images")
    assert_refused(result, "--show-dir", tmp_path / "data" / "images", tmp_path / "data" / "images")
    assert "the same folder as data.val.dataset" in result.stderr
    assert snapshot(tmp_path / "data") == before
    result = call_tool("test", *common, "--show-dir", tmp_path / "shown")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "shown").iterdir()) == [f"s{i}.png" for i in range(6)]
    assert snapshot(tmp_path / "data") == before


def test_browse_dataset_into_the_mask_folder_is_refused(tmp_path):
    config = make_folder(tmp_path / "data")
    before = snapshot(tmp_path / "data")
    result = call_tool("browse_dataset", "--config", config, "--output", tmp_path / "data" / "masks", "--num", "2",
                       "data.train.batch_size=2")
    assert_refused(result, "--output", tmp_path / "data" / "masks", tmp_path / "data" / "masks")
    assert snapshot(tmp_path / "data") == before


def test_converted_masks_over_the_colour_masks_are_refused(tmp_path):
    config = make_folder(tmp_path / "data", faults=True)  # masks/s3.png is a colour mask
    before = snapshot(tmp_path / "data")
    os.symlink(tmp_path / "data" / "masks", tmp_path / "link")
    for output in (tmp_path / "data" / "masks", tmp_path / "link"):
        result = call_tool("check_dataset", "--config", config, "--convert-rgb-masks", output)
        assert_refused(result, "--convert-rgb-masks", output, tmp_path / "data" / "masks")
    assert snapshot(tmp_path / "data") == before


@pytest.mark.parametrize("tool, option, extra", [
    ("check_dataset", "--json", []), ("print_config", "--output", []), ("analyze_model", "--json", ["--depth", "0"])])
def test_a_report_over_the_config_is_refused(tool, option, extra, tmp_path):
    config = make_folder(tmp_path / "data")
    os.symlink(config, tmp_path / "config_link.yaml")
    before = snapshot(tmp_path / "data")
    for output in (config, tmp_path / "config_link.yaml"):
        result = call_tool(tool, "--config", config, option, output, *extra)
        assert_refused(result, option, output, config)
        assert f"which is --config {config}" in result.stderr
    assert snapshot(tmp_path / "data") == before


def test_export_over_the_checkpoint_is_refused(unet_run, tmp_path):
    checkpoint = tmp_path / "model.pth"
    shutil.copy(unet_run.checkpoint, checkpoint)
    before = checkpoint.read_bytes()
    result = call_tool("export", "--config", unet_run.config, "--checkpoint", checkpoint, "--format", "torchscript",
                       "--size", "32", "32", "--output", checkpoint)
    assert_refused(result, "--output", checkpoint, checkpoint)
    assert checkpoint.read_bytes() == before


def test_the_folders_a_dataset_reads_are_found_from_its_attributes(tmp_path):
    from framework.data import ImageMaskFolder

    make_folder(tmp_path / "data")
    dataset = ImageMaskFolder(str(tmp_path / "data"), classes=CLASSES)
    found = {os.path.realpath(folder) for folder in folders_read_by(dataset)}
    assert found == {str(tmp_path / "data" / "images"), str(tmp_path / "data" / "masks")}


def test_the_folders_of_listed_files_and_of_a_wrapped_dataset_are_found(tmp_path):
    """A dataset that keeps only file lists (pix2pix's `files`), held by another (a wrapper)."""
    import numpy as np
    from torch.utils.data import Dataset

    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()

    class Listed(Dataset):
        def __init__(self):
            self.files = np.array([str(tmp_path / "a" / "x.png"), str(tmp_path / "b" / "y.png")])
            self.names = np.array(["x", "y"])  # names, not paths: no folder

    class Wrapper(Dataset):
        def __init__(self, inner):
            self.inner = inner

    assert folders_read_by(Wrapper(Listed())) == [str(tmp_path / "a"), str(tmp_path / "b")]
