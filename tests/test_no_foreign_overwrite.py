"""The tools that write a tree of fixed names never replace a file they did not write (issue 63,
items 1 and 2): the fixture writer uses the published names (a real `aachen_000000_000019` image,
VOC's `train.txt`), `save_pretrained` writes `README.md` and `config.yaml`, names a user's folder
already holds. Each refusal is one line naming the file, and the user's bytes are unchanged."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import framework
from framework.data.published import fixture_trees
from framework.data.published.fixture_trees import MARKER, write_fixture_tree
from framework.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
REAL_IMAGE = Path("leftImg8bit/train/aachen/aachen_000000_000019_leftImg8bit.png")
REAL_LABELS = Path("gtFine/train/aachen/aachen_000000_000019_gtFine_labelIds.png")
VOC_TRAIN_LIST = Path("VOCdevkit/VOC2012/ImageSets/Segmentation/train.txt")


def make_fixture(out: Path, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tools/make_fixture_dataset.py"), *options, str(out)],
                          capture_output=True, text=True, cwd=out.parent, timeout=120)


def user_files(root: Path, names) -> dict[Path, bytes]:
    """Write each name under `root` with distinct bytes (as a user's real files); return them."""
    files = {}
    for k, name in enumerate(names):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f"the user's own file {k}".encode())
        files[path] = path.read_bytes()
    return files


def unchanged(files: dict[Path, bytes]) -> bool:
    return all(path.read_bytes() == data for path, data in files.items())


@pytest.mark.parametrize(("layout", "real_names"), [("cityscapes", [REAL_IMAGE, REAL_LABELS]),
                                                    ("voc_sbd", [VOC_TRAIN_LIST])])
def test_the_fixture_tool_refuses_a_folder_holding_the_real_dataset(tmp_path, layout, real_names):
    root = tmp_path / "data"
    real = user_files(root, real_names)
    result = make_fixture(root, "--layout", layout)
    assert result.returncode != 0
    assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.stderr
    assert "did not write" in result.stderr and any(name.name in result.stderr for name in real_names)
    assert unchanged(real)
    assert not (root / MARKER).exists()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["data"]  # no staging folder left


def test_a_fixture_tree_is_rewritten_in_place_and_only_its_own_files_replaced(tmp_path):
    out = tmp_path / "fake"
    first = write_fixture_tree("cityscapes", out, samples=3, seed=0)
    image = first / "leftImg8bit/train/aachen/aachen_000002_000021_leftImg8bit.png"
    assert image.is_file()
    second = write_fixture_tree("cityscapes", out, samples=1, seed=1)  # its own tree: replaced
    assert second == first and not image.exists()  # the third sample of the first tree is gone
    assert (out / REAL_IMAGE).is_file()
    # a file the user added to the fixture tree is not the fixture's: the next rewrite is refused
    added = user_files(out, ["notes.txt"])
    with pytest.raises(ConfigError, match="notes.txt"):
        write_fixture_tree("cityscapes", out, samples=1, seed=2)
    assert unchanged(added) and (out / REAL_IMAGE).is_file()


def test_a_fixture_that_fails_half_way_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    def half_a_tree(layout, out, samples, seed, train_ids):
        (out / "half").mkdir()
        (out / "half/written.png").write_bytes(b"x")
        raise OSError("disk full")

    monkeypatch.setattr(fixture_trees, "write_tree", half_a_tree)
    with pytest.raises(OSError):
        write_fixture_tree("ade20k", tmp_path / "new")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def trained(unet_run):
    return framework.load(unet_run.work_dir, device="cpu")


def test_save_pretrained_refuses_a_folder_with_the_users_readme_and_config(trained, tmp_path):
    folder = tmp_path / "mine"
    users = user_files(folder, ["README.md", "config.yaml"])
    with pytest.raises(ConfigError) as error:
        trained.save_pretrained(folder)
    assert "\n" not in str(error.value) and "did not write" in str(error.value) and "overwrite=True" in str(error.value)
    assert unchanged(users) and sorted(path.name for path in folder.iterdir()) == ["README.md", "config.yaml"]


@pytest.mark.parametrize("folder", ["", " ", ".", None, 3])
def test_save_pretrained_refuses_no_folder_and_the_current_one(trained, tmp_path, monkeypatch, folder):
    monkeypatch.chdir(tmp_path)
    users = user_files(tmp_path, ["README.md"])
    with pytest.raises(ConfigError, match="save_pretrained folder"):
        trained.save_pretrained(folder)
    assert unchanged(users) and sorted(os.listdir(tmp_path)) == ["README.md"]


def test_save_pretrained_saves_again_over_its_own_folder_but_not_over_an_edited_card(trained, tmp_path):
    folder = trained.save_pretrained(tmp_path / "model")
    assert sorted(path.name for path in folder.iterdir()) == ["README.md", "config.yaml", "model.safetensors"]
    trained.save_pretrained(folder)  # its own three files, as written: replaced
    (folder / "README.md").write_text("# my notes on this model\n")
    with pytest.raises(ConfigError, match="README.md"):
        trained.save_pretrained(folder)
    assert (folder / "README.md").read_text() == "# my notes on this model\n"
    extra = user_files(folder, ["eval/results.csv"])
    trained.save_pretrained(folder, overwrite=True)  # asked for by name: the three names, nothing else
    assert (folder / "README.md").read_text() != "# my notes on this model\n" and unchanged(extra)
    with pytest.raises(ConfigError, match="overwrite"):
        trained.save_pretrained(tmp_path / "other", overwrite="yes")
    again = framework.load(folder, device="cpu")
    image = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    assert np.array_equal(again.predict(image), trained.predict(image))
