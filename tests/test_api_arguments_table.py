"""Every argument of the public Python API (framework.load/train/evaluate and the Model methods
docs/python-api.md lists) tried with bad values: a wrong type, a negative, zero, a non-number, a
file where a folder is wanted and the reverse, a missing path, an unknown choice, an option the
model does not use. Each must be refused by one line naming the argument (a ConfigError; a
CheckpointError where a file's content is at fault), no other exception, nothing written.
`test_every_public_argument_is_in_the_table` reads the signatures: a new argument must join BAD.

The models are built in-process from the tiny configs of tests/conftest.py with their initial
weights (no training: an argument is refused before any forward pass), once per module."""

import inspect
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import (
    DCGAN_CONFIG,
    PIX2PIX_CONFIG,
    SEGMENTATION_CONFIG,
    TINY_DCGAN_RUN,
    TINY_PIX2PIX_RUN,
    TINY_UNET_RUN,
)
from PIL import Image
from test_synthesis_tools import TINY as TINY_SYNTHESIS

import framework
from framework.api.model import Model
from framework.engine.trained import load_trained_task
from framework.errors import CheckpointError, ConfigError
from support import REPO

SPADE_CONFIG = REPO / "configs/synthesis/spade_textures.yaml"
CONFIGS = {"unet": (SEGMENTATION_CONFIG, TINY_UNET_RUN), "pix2pix": (PIX2PIX_CONFIG, TINY_PIX2PIX_RUN),
           "dcgan": (DCGAN_CONFIG, TINY_DCGAN_RUN),
           "spade": (SPADE_CONFIG, [*TINY_SYNTHESIS, "task.discriminator.num_layers=2"])}
# tools/infer.py's batch functions: they take what infer.py has read and checked (not in docs/python-api.md)
INFER_BATCH_FUNCTIONS = {"predictor", "segment_batch", "generator", "translate_batch", "sample_batch",
                         "synthesis_batch", "check_labels"}
# arguments the table cannot try, and why
NOT_TRIED = {("push_to_hub", "kwargs"): "passed on to huggingface_hub's upload_folder, which checks them"}

IMAGE = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
LABELS = np.random.default_rng(1).integers(0, 3, (32, 32), dtype=np.uint8)


class Paths:
    """Placeholders for paths made per module: resolved by `Context.value`."""
    MISSING, FILE, FOLDER, CONFIG, RUN, MODEL_FOLDER, TRUNCATED, IMAGE_FILE = (
        "<missing>", "<file>", "<folder>", "<config.yaml>", "<run>", "<model folder>", "<truncated>", "<image>")


P = Paths

# (callable, argument) -> [(bad value, the model it is given to[, the error's class[, a key word the
# message must hold besides the argument's name]])]. The value is
# a placeholder path, an object, or a callable of the context. Model methods run on "unet" unless
# a model is named; a generate/translate row names its kind of generator.
BAD = {
    ("load", "path"): [(5, None), ("", None), (P.MISSING, None), ("someone/not-cached", None, CheckpointError),
                       (P.CONFIG, None, ConfigError, "config file"), (P.TRUNCATED, None, CheckpointError, "model.safetensors"),
                       (P.FILE, None, CheckpointError, "checkpoint")],
    ("load", "device"): [("gpu7", None), (5, None), ("cpu:x", None)],
    ("load", "config"): [(P.MISSING, None, ConfigError, "no such file"), (P.FOLDER, None), (5, None), (P.CONFIG, "model folder")],
    ("load", "num_classes"): [("4", None, ConfigError, "integer"), (0, None), (-1, None), (2.5, None), (7, None), (True, None)],
    ("train", "config"): [(5, None), (P.MISSING, None), (P.FOLDER, None)],
    ("train", "overrides"): [("device=cpu", None), ([5], None)],
    ("train", "work_dir"): [(P.FILE, None), (5, None)],
    ("train", "resume"): [(5, None), (P.MISSING, None), (P.FOLDER, None)],
    ("train", "overwrite"): [("yes", None), (1, None)],
    ("evaluate", "config"): [(5, None), (P.MISSING, None), (P.FOLDER, None)],
    ("evaluate", "checkpoint"): [(5, None), (P.MISSING, None), (P.FOLDER, None), (P.FILE, None, CheckpointError)],
    ("evaluate", "overrides"): [("device=cpu", None), ([None], None)],
    ("evaluate", "show_dir"): [(P.FILE, None), (5, None)],
    ("predict", "images"): [(5, "unet"), (torch.zeros(32, 32, 3, dtype=torch.uint8), "unet", ConfigError, "Tensor"), (P.MISSING, "unet"),
                            (P.FOLDER, "unet"), ((IMAGE / 255).astype(np.float32), "unet"),
                            (IMAGE.astype(np.int64) - 1, "unet"), (IMAGE[..., 0], "unet"), (IMAGE > 0, "unet"),
                            (np.full((32, 32, 3), np.nan, np.float32), "unet"), ([IMAGE, 7], "unet"),
                            (IMAGE.astype(np.float32) * 2, "unet")],
    ("predict", "probabilities"): [("yes", "unet"), (1, "unet")],
    ("predict", "batch_size"): [(0, "unet"), (-1, "unet"), ("4", "unet"), (2.5, "unet")],
    ("predict", "amp"): [("no", "unet")],
    ("generate", "conditions"): [(np.stack([LABELS] * 3, axis=-1), "spade"), (LABELS.astype(np.float32), "spade"),
                                 (np.full((32, 32), -1), "spade"), (np.full((32, 32), 7), "spade"),
                                 (torch.zeros(32, 32, dtype=torch.long), "spade"), (5, "spade"), (P.MISSING, "spade"),
                                 ((IMAGE / 255).astype(np.float32), "pix2pix"), (IMAGE, "dcgan"), (None, "pix2pix")],
    ("generate", "noise"): [(np.zeros((2, 3), np.float32), "dcgan"), ("abc", "dcgan"),
                            (np.zeros((2, 64, 1, 1), np.int64), "dcgan"), (np.zeros((1, 5), np.float32), "spade"),
                            (np.zeros((2, 16), np.float32), "spade"), (np.zeros((1, 3), np.float32), "pix2pix"),
                            (np.full((1, 64, 1, 1), np.nan, np.float32), "dcgan")],
    ("generate", "samples"): [(0, "spade"), (-1, "spade"), ("2", "spade"), (2.5, "spade"), (3, "pix2pix"),
                              (2, "dcgan")],
    ("generate", "seed"): [(-1, "spade"), ("3", "spade"), (2**64, "spade"), (1.5, "dcgan"), (5, "pix2pix")],
    ("generate", "num"): [(0, "dcgan"), (-2, "dcgan"), ("3", "dcgan"), (3, "spade"), (3, "pix2pix")],
    ("generate", "names"): [(["a", "b"], "spade"), ([], "spade"), ([1], "spade"), ("a", "spade"), (["a"], "pix2pix")],
    ("generate", "direction"): [("AtoB", "pix2pix"), (5, "spade")],
    ("generate", "batch_size"): [(0, "dcgan"), ("x", "spade"), (-3, "pix2pix")],
    ("generate", "amp"): [("yes", "dcgan")],
    ("translate", "images"): [(5, "pix2pix"), ((IMAGE / 255).astype(np.float32), "pix2pix"),
                              (torch.zeros(3, 32, 32), "pix2pix"), (P.FOLDER, "pix2pix")],
    ("translate", "direction"): [("sideways", "pix2pix")],
    ("translate", "batch_size"): [(0, "pix2pix")],
    ("translate", "amp"): [("x", "pix2pix")],
    ("saliency", "images"): [(torch.zeros(32, 32, 3), "unet"), (5, "unet"), ((IMAGE / 255).astype(np.float32), "unet")],
    ("saliency", "target"): [("no such class", "unet"), (99, "unet"), (-1, "unet"), ("discriminator", "unet")],
    ("saliency", "region"): [((IMAGE[..., 0] > 100).astype(np.uint8), "unet", ConfigError, "uint8"), ((0, 0, 99, 4), "unet"),
                             ("box", "unet"), (np.zeros((32, 32), bool), "unet")],
    ("saliency", "method"): [("magic", "unet"), (None, "unet")],
    ("saliency", "samples"): [(0, "unet"), ("5", "unet")],
    ("saliency", "noise"): [(-0.1, "unet"), (float("nan"), "unet"), ("x", "unet")],
    ("saliency", "seed"): [(-1, "unet"), ("3", "unet")],
    ("saliency", "direction"): [("AtoB", "unet")],
    ("saliency", "batch_size"): [(0, "unet")],
    ("saliency", "names"): [(["a", "b"], "unet"), ([1], "unet")],
    ("colorize", "mask"): [(LABELS.astype(np.float32), "unet"), (np.stack([LABELS] * 3, -1), "unet"), ("x", "unet"),
                           (torch.zeros(4, 4, dtype=torch.long), "unet")],
    ("save_pretrained", "folder"): [(5, "unet"), (P.FILE, "unet"), ("", "unet")],
    ("save_pretrained", "overwrite"): [("yes", "unet"), (1, "unet")],
    ("push_to_hub", "repo"): [(5, "unet"), ("noslash", "unet"), ("a/b/c", "unet")],
}
ROWS = [pytest.param(call, argument, *row[:2], row[2] if len(row) > 2 else ConfigError, row[3] if len(row) > 3 else "",
                     id=f"{call}-{argument}-{index}")
        for (call, argument), rows in BAD.items() for index, row in enumerate(rows)]


class Context:
    """The module's models and files, under one root whose files are compared before and after each call."""

    def __init__(self, root: Path):
        self.root = root
        device = torch.device("cpu")
        self.models = {name: Model(*load_trained_task(str(config), None, overrides, device), device)
                       for name, (config, overrides) in CONFIGS.items()}
        inputs = root / "inputs"
        inputs.mkdir()
        (inputs / "folder").mkdir()
        (inputs / "notes.txt").write_text("not a checkpoint\n")
        Image.fromarray(IMAGE).save(inputs / "image.png")
        unet = self.models["unet"]
        self.model_folder = unet.save_pretrained(inputs / "model")
        self.truncated = shutil.copytree(self.model_folder, inputs / "truncated")
        weights = self.truncated / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:100])
        self.run = inputs / "run"  # a run folder: its config.yaml, a checkpoint and `latest`
        (self.run / "checkpoints").mkdir(parents=True)
        (self.run / "config.yaml").write_text(yaml.safe_dump(unet.config, sort_keys=False))
        torch.save({"meta": {"iter": 1}, "task": unet.task.state_dict(), "optim": {}, "rng": {}},
                   self.run / "checkpoints/iter_1.pth")
        (self.run / "checkpoints/latest").write_text("iter_1.pth")
        self.paths = {P.MISSING: inputs / "missing.png", P.FILE: inputs / "notes.txt", P.FOLDER: inputs / "folder",
                      P.CONFIG: self.run / "config.yaml", P.RUN: self.run, P.MODEL_FOLDER: self.model_folder,
                      P.TRUNCATED: self.truncated, P.IMAGE_FILE: inputs / "image.png"}

    def value(self, value):
        return self.paths[value] if isinstance(value, str) and value in self.paths else value

    def snapshot(self) -> dict:
        return {path: path.stat().st_mtime_ns for path in self.root.rglob("*")}


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    return Context(tmp_path_factory.mktemp("api_arguments"))


def call_with(context: Context, call: str, argument: str, value, model: str | None):
    """`call` with valid arguments but `argument`=value (`model` "model folder": load of the model folder)."""
    bad = {argument: context.value(value)}
    if call == "load":
        where = context.model_folder if model == "model folder" else context.run
        return framework.load(**{"path": where, "device": "cpu", **bad})
    if call == "train":
        return framework.train(**{"config": SEGMENTATION_CONFIG, "overrides": TINY_UNET_RUN,
                                  "work_dir": context.root / "work", **bad})
    if call == "evaluate":
        return framework.evaluate(**{"config": context.run / "config.yaml",
                                     "checkpoint": context.run / "checkpoints/iter_1.pth", **bad})
    instance = context.models[model]
    first = {"predict": {"images": IMAGE}, "translate": {"images": IMAGE}, "colorize": {"mask": LABELS},
             "saliency": {"images": IMAGE, "target": 1}, "save_pretrained": {"folder": context.root / "saved"},
             "push_to_hub": {"repo": "someone/shapes"},
             "generate": {"conditions": {"spade": LABELS, "pix2pix": IMAGE}.get(model)}}[call]
    return getattr(instance, call)(**{**first, **bad})


@pytest.mark.parametrize("call, argument, value, model, error, words", ROWS)
def test_a_bad_argument_is_refused_in_one_line_naming_it(context, call, argument, value, model, error, words,
                                                         monkeypatch):
    monkeypatch.chdir(context.root / "inputs/folder")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a Hub name is looked up in the local cache only
    monkeypatch.setenv("HF_HUB_CACHE", str(context.root / "no_hub_cache"))
    before = context.snapshot()
    with pytest.raises(error) as raised:
        call_with(context, call, argument, value, model)
    message = str(raised.value)
    assert "\n" not in message, message
    named = isinstance(value, str) and value != ""  # a file's fault may name the file (or Hub name) instead
    assert argument in message or named and str(context.value(value)) in message, message
    assert words in message, message
    assert context.snapshot() == before  # nothing written, nothing touched


def public_signatures() -> dict[str, inspect.Signature]:
    """{name: signature} of framework.api's functions and Model's public methods."""
    found = {name: inspect.signature(getattr(framework, name)) for name in framework.api.__all__ if name != "Model"}
    for name, member in inspect.getmembers(Model, inspect.isfunction):
        if not name.startswith("_") and name not in INFER_BATCH_FUNCTIONS:
            found[name] = inspect.signature(member)
    return found


def test_every_public_argument_is_in_the_table():
    missing = [(name, parameter) for name, signature in public_signatures().items()
               for parameter in signature.parameters if parameter != "self"
               and (name, parameter) not in BAD and (name, parameter) not in NOT_TRIED]
    assert missing == [], f"arguments without bad values in BAD: {missing}"
    assert set(framework.API) == {*framework.api.__all__}


def test_the_batch_functions_left_out_are_not_documented_as_api():
    page = (REPO / "docs/python-api.md").read_text()
    assert [name for name in INFER_BATCH_FUNCTIONS if f"model.{name}(" in page or f"`{name}`" in page] == []
