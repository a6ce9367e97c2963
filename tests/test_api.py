"""The Python API (framework/api): `load(...)` predicts and generates exactly what tools/infer.py
writes on the same checkpoint, a model folder (save_pretrained) loads back bit-identically with no
network touched, and the docs' examples (docs/python-api.md) run as written."""

import json
import socket
import subprocess
import sys

import cv2
import numpy as np
import pytest
import torch
from PIL import Image
from safetensors import safe_open
from test_synthesis_tools import TINY as TINY_SYNTHESIS

import framework
from framework.errors import ConfigError
from support import REPO, call_tool, code_blocks

SPADE = REPO / "configs/synthesis/spade_textures.yaml"
SPADE_RUN = [*TINY_SYNTHESIS, "task.discriminator.num_layers=2"]


@pytest.fixture
def no_network(monkeypatch):
    """Every socket connection fails, and is recorded."""
    attempts = []

    def refuse(self, address):
        attempts.append(address)
        raise OSError(f"test: no network ({address})")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    return attempts


@pytest.fixture(scope="module")
def spade_run(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("spade")
    result = call_tool("train", "--config", SPADE, "--work-dir", work_dir, *SPADE_RUN)
    assert result.returncode == 0, result.stderr + result.stdout[-2000:]
    return work_dir


def write_images(folder, sizes, seed=0):
    """RGB PNGs of the given sizes, a.png, b.png, ...; their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for index, (height, width) in enumerate(sizes):
        paths.append(folder / f"{chr(ord('a') + index)}.png")
        assert cv2.imwrite(str(paths[-1]), rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
    return paths


def read_rgb(path):
    return np.asarray(Image.open(path).convert("RGB"))


def test_import_framework_leaves_torch_for_the_first_call():
    code = "import sys, framework; framework.load; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_predict_equals_the_masks_infer_writes(unet_run, tmp_path):
    paths = write_images(tmp_path / "in", [(32, 32), (32, 32), (37, 45), (32, 32)])
    result = call_tool("infer", *unet_run.args(), "--input", tmp_path / "in", "--output", tmp_path / "out",
                       "--batch-size", "2")
    assert result.returncode == 0, result.stderr
    model = framework.load(unet_run.checkpoint, device="cpu")
    labels = model.predict(paths, batch_size=2)
    arrays = model.predict([read_rgb(path) for path in paths], batch_size=3)
    for path, label, from_array in zip(paths, labels, arrays):
        written = np.asarray(Image.open(tmp_path / "out/masks" / path.name))
        assert label.shape == written.shape == from_array.shape
        assert (label == written).all() and (from_array == written).all()
    single, probabilities = model.predict(Image.open(paths[2]), probabilities=True)
    assert (single == labels[2]).all() and probabilities.shape == (len(model.classes), 37, 45)
    assert (probabilities.argmax(0) == single).all() and np.allclose(probabilities.sum(0), 1, atol=1e-5)
    assert model.colorize(single).shape == (37, 45, 3)
    assert (model.colorize(single) == model.palette[single]).all()


def test_a_segmenter_folder_predicts_bit_identically_and_its_card_holds_the_metrics(unet_run, tmp_path,
                                                                                     no_network):
    model = framework.load(unet_run.work_dir, device="cpu")  # the run folder: best.pth, else latest
    images = [np.random.default_rng(i).integers(0, 256, (33, 40, 3), dtype=np.uint8) for i in range(3)]
    folder = model.save_pretrained(tmp_path / "model")
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "config.yaml", "model.safetensors"]
    again = framework.load(folder, device="cpu", num_classes=len(model.classes))
    for before, after in zip(model.predict(images), again.predict(images)):
        assert (before == after).all()
    assert again.classes == model.classes and (again.palette == model.palette).all()
    card = (folder / "README.md").read_text()
    last = json.loads((unet_run.work_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert model.metrics == last
    assert f"| mIoU | {last['mIoU']:.4f} |" in card and "SyntheticShapes" in card and "circle" in card
    assert framework.__version__ in card and "tools/train.py --config config.yaml" in card
    again.save_pretrained(tmp_path / "copy")  # the metrics travel with the folder
    assert f"| mIoU | {last['mIoU']:.4f} |" in (tmp_path / "copy/README.md").read_text()
    assert no_network == []


def test_pix2pix_generates_what_infer_writes_and_round_trips(pix2pix_run, tmp_path, no_network):
    paths = write_images(tmp_path / "in", [(32, 32), (24, 40)])
    result = call_tool("infer", *pix2pix_run.args(), "--input", tmp_path / "in", "--output", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    model = framework.load(pix2pix_run.checkpoint, device="cpu")
    images = model.generate(paths)
    for path, image in zip(paths, images):
        assert (image == read_rgb(tmp_path / "out" / path.name)).all()
    folder = model.save_pretrained(tmp_path / "model")
    with safe_open(str(folder / "model.safetensors"), framework="pt") as weights:  # the EMA generator alone
        saved = {key: weights.get_tensor(key) for key in weights.keys()}  # noqa: SIM118 (not a dict)
    ema = model.task.generator_for(None).state_dict()
    assert saved.keys() == {f"generator.{key}" for key in ema}
    assert all(torch.equal(saved[f"generator.{key}"], value) for key, value in ema.items())
    assert ema.keys() and model.task.generator_for(None) is not model.task.generator  # the run kept an EMA copy
    again = framework.load(folder, device="cpu")
    for before, after in zip(images, again.translate([read_rgb(path) for path in paths])):
        assert (before == after).all()
    assert no_network == []


def test_synthesis_draws_what_infer_writes_and_round_trips(spade_run, tmp_path, no_network):
    (tmp_path / "maps").mkdir()
    rng = np.random.default_rng(0)
    maps = {name: rng.integers(0, 3, size, dtype=np.uint8) for name, size in (("x", (32, 32)), ("y", (16, 24)))}
    for name, labels in maps.items():
        Image.fromarray(labels).save(tmp_path / "maps" / f"{name}.png")
    checkpoint = spade_run / "checkpoints/iter_2.pth"
    result = call_tool("infer", "--config", spade_run / "config.yaml", "--checkpoint", checkpoint, "--input",
                       tmp_path / "maps", "--output", tmp_path / "out", "--samples", "2", "--seed", "3")
    assert result.returncode == 0, result.stderr
    model = framework.load(checkpoint, device="cpu")
    draws = model.generate(list(maps.values()), samples=2, seed=3, names=list(maps))
    for name, images in zip(maps, draws):
        for k, image in enumerate(images):
            assert (image == read_rgb(tmp_path / "out" / f"{name}_{k}.png")).all()
    with pytest.raises(ConfigError) as error:
        model.generate([maps["x"], np.full((8, 8), 7, np.uint8)])
    assert str(error.value) == "conditions[1] holds label 7, not a class of this task (0..6, or 255 for don't-care)"
    single = model.generate(maps["x"], samples=2, seed=3, names=["x"])  # one H x W map: one result
    assert all((a == b).all() for a, b in zip(single, draws[0]))
    again = framework.load(model.save_pretrained(tmp_path / "model"), device="cpu")
    by_path = again.generate(sorted((tmp_path / "maps").iterdir()), samples=2, seed=3)  # keyed by file name
    for before, after in zip(draws, by_path):
        assert all((b == a).all() for b, a in zip(before, after))
    assert no_network == []


def test_an_unconditional_gan_samples_what_infer_writes(dcgan_run, tmp_path):
    result = call_tool("infer", *dcgan_run.args(), "--output", tmp_path / "out", "--num", "3", "--seed", "5")
    assert result.returncode == 0, result.stderr
    model = framework.load(dcgan_run.checkpoint, device="cpu")
    for index, image in enumerate(model.generate(num=3, seed=5, batch_size=2)):
        assert (image == read_rgb(tmp_path / "out" / f"sample_{index:04d}.png")).all()


def test_the_python_api_page_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").symlink_to(REPO / "configs")
    namespace = {}
    blocks = code_blocks("python-api.md", "python")
    assert len(blocks) >= 3
    for block in blocks:
        exec(compile(block, "docs/python-api.md", "exec"), namespace)  # noqa: S102 (the docs' own code)


CYCLEGAN = REPO / "projects/cyclegan/configs/cyclegan_shapes.yaml"
TINY_CYCLEGAN = ["device=cpu", "train.max_iters=2", "train.val_interval=2", "train.val_at_start=false",
                 "train.ckpt_interval=2", "train.log_interval=1", "data.train.dataset.num_samples=4",
                 "data.train.batch_size=2", "data.train.num_workers=0", "data.val.dataset.num_samples=4",
                 "data.val.batch_size=4", "data.val.num_workers=0", "task.generator_ab.base_channels=4",
                 "task.generator_ba.base_channels=4", "task.generator_ab.num_blocks=1",
                 "task.generator_ba.num_blocks=1", "loggers=[]"]


def test_cyclegan_translates_both_ways_as_infer_does_and_round_trips(tmp_path, no_network):
    run = tmp_path / "run"
    result = call_tool("train", "--config", CYCLEGAN, "--work-dir", run, *TINY_CYCLEGAN)
    assert result.returncode == 0, result.stderr + result.stdout[-2000:]
    paths = write_images(tmp_path / "in", [(32, 32), (20, 28)])
    model = framework.load(run, device="cpu")
    folder = model.save_pretrained(tmp_path / "model")
    again = framework.load(folder, device="cpu")
    for direction in ("AtoB", "BtoA"):
        out = tmp_path / direction
        result = call_tool("infer", "--config", run / "config.yaml", "--checkpoint", run / "checkpoints/iter_2.pth",
                           "--input", tmp_path / "in", "--output", out, "--direction", direction)
        assert result.returncode == 0, result.stderr
        images = model.translate(paths, direction)
        for path, image, after in zip(paths, images, again.translate(paths, direction)):
            assert (image == read_rgb(out / path.name)).all() and (after == image).all()
    assert no_network == []
