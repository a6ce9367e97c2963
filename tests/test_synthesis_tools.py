"""The tools on a semantic synthesis run: train (both discriminators), infer on label maps of any
size with several draws, analyze_model, test with the synthesis metrics; label values outside the
classes refused in one line naming the file."""

import json

import cv2
import numpy as np
import pytest

from framework.config import load_config
from support import REPO, call_tool, named

TINY = ["device=cpu", "amp.enabled=false", "train.max_iters=2", "train.ckpt_interval=2", "train.val_interval=2",
        "train.val_at_start=false", "train.log_interval=1", "data.train.num_workers=0", "data.val.num_workers=0",
        "data.train.batch_size=2", "data.val.batch_size=4", "data.train.dataset.num_samples=4",
        "data.val.dataset.num_samples=4", "data.train.dataset.size=32", "data.val.dataset.size=32",
        "task.generator.image_size=32", "task.generator.base_channels=4", "task.generator.num_up_layers=2",
        "task.generator.spade_hidden=8", "task.discriminator.base_channels=4", "loggers=[]",
        "metrics=[{type: Diversity}, {type: PSNR}]", "train.best_metric=PSNR"]
CONFIGS = {"oasis": REPO / "configs/synthesis/oasis_textures.yaml", "spade": REPO / "configs/synthesis/spade_textures.yaml"}


@pytest.fixture(scope="module", params=list(CONFIGS))
def run(request, tmp_path_factory):
    work_dir = tmp_path_factory.mktemp(request.param)
    extra = ["task.discriminator.num_layers=2"] if request.param == "spade" else []
    result = call_tool("train", "--config", CONFIGS[request.param], "--work-dir", work_dir, *TINY, *extra)
    assert result.returncode == 0, result.stderr + result.stdout[-2000:]
    return request.param, work_dir, extra


def args(run):
    name, work_dir, extra = run
    return ["--config", CONFIGS[name], "--checkpoint", work_dir / "checkpoints" / "iter_2.pth", *TINY, *extra]


def test_infer_turns_label_maps_of_any_size_into_several_draws(run, tmp_path):
    rng = np.random.default_rng(0)
    cv2.imwrite(str(tmp_path / "square.png"), rng.integers(0, 7, (32, 32), dtype=np.uint8))
    odd = rng.integers(0, 7, (29, 35), dtype=np.uint8)
    odd[:4, :4] = 255  # don't-care
    cv2.imwrite(str(tmp_path / "odd.png"), odd)
    (tmp_path / "maps").mkdir()
    for name in ("square", "odd"):
        (tmp_path / "maps" / f"{name}.png").write_bytes((tmp_path / f"{name}.png").read_bytes())
    out = tmp_path / "out"
    for name in ("square", "odd"):  # each map alone
        result = call_tool("infer", *args(run), "--input", tmp_path / f"{name}.png", "--output", out, "--samples", "2")
        assert result.returncode == 0, result.stderr
    first, second = (cv2.imread(str(out / f"odd_{k}.png")) for k in range(2))
    assert first.shape == (29, 35, 3) and cv2.imread(str(out / "square_1.png")).shape == (32, 32, 3)
    assert np.abs(first.astype(int) - second).mean() > 0  # another noise, another image
    # both sizes in one folder at --batch-size 4: batched by size, the same images (issue 51, item 6)
    result = call_tool("infer", *args(run), "--input", tmp_path / "maps", "--output", tmp_path / "mixed", "--samples",
                       "2", "--batch-size", "4")
    assert result.returncode == 0, result.stderr
    for name in ("square_0", "square_1", "odd_0", "odd_1"):
        assert np.array_equal(cv2.imread(str(tmp_path / "mixed" / f"{name}.png")), cv2.imread(str(out / f"{name}.png")))


def write_label_maps(folder, names, size=(32, 32)):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    for name in names:
        cv2.imwrite(str(folder / name), rng.integers(0, 7, size, dtype=np.uint8))


def test_a_seed_names_each_maps_images_whatever_the_batch_and_the_other_maps(run, tmp_path):
    """Draw k of a map comes from (--seed, k, the map's name) alone: the same images for c.png alone
    at --batch-size 1 and among three other maps at --batch-size 4."""
    write_label_maps(tmp_path / "maps", ["a.png", "b.png", "c.png", "d.png"])
    write_label_maps(tmp_path / "alone", ["c.png"])
    (tmp_path / "alone" / "c.png").write_bytes((tmp_path / "maps" / "c.png").read_bytes())
    runs = {"alone": (tmp_path / "alone" / "c.png", 1, 3), "batched": (tmp_path / "maps", 4, 3),
            "other_seed": (tmp_path / "alone" / "c.png", 1, 4)}
    for label, (given, batch, seed) in runs.items():
        result = call_tool("infer", *args(run), "--input", given, "--output", tmp_path / f"out_{label}", "--samples", "2",
                           "--batch-size", batch, "--seed", seed)
        assert result.returncode == 0, result.stderr
    alone, batched, other = ([cv2.imread(str(tmp_path / f"out_{label}" / f"c_{k}.png")) for k in range(2)] for label in runs)
    for k in range(2):
        assert np.array_equal(alone[k], batched[k]), f"draw {k}: batch size 1 alone and 4 among others differ"
    assert not np.array_equal(alone[0], alone[1]) and not np.array_equal(alone[0], other[0])


def test_infer_refuses_to_write_over_its_label_maps(run, tmp_path):
    write_label_maps(tmp_path / "maps", ["a.png", "b.png"])
    before = {path.name: path.read_bytes() for path in (tmp_path / "maps").iterdir()}
    result = call_tool("infer", *args(run), "--input", tmp_path / "maps", "--output", tmp_path / "maps")
    assert result.returncode == 2
    assert result.stderr.strip() == (f"error: --output {tmp_path / 'maps'}: the same folder as --input "
                                     f"{tmp_path / 'maps'}; results written there could replace the files read: "
                                     "choose another folder")
    assert {path.name: path.read_bytes() for path in (tmp_path / "maps").iterdir()} == before


def test_infer_refuses_a_label_outside_the_classes_naming_the_file(run, tmp_path):
    labels = np.zeros((32, 32), dtype=np.uint8)
    labels[5, 5] = 7  # the classes are 0..6
    cv2.imwrite(str(tmp_path / "bad.png"), labels)
    result = call_tool("infer", *args(run), "--input", tmp_path / "bad.png", "--output", tmp_path / "out")
    assert result.returncode != 0
    assert f"--input: {tmp_path / 'bad.png'} holds label 7, not a class of this task (0..6, or 255 for don't-care)" \
        in result.stderr
    assert not list((tmp_path / "out").glob("*.png"))


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_export_takes_label_maps_and_noise_of_any_size(run, tmp_path, fmt):
    import torch

    from framework.engine.trained import load_trained_task
    from framework.inference.export import run_exported

    output = tmp_path / f"generator.{fmt}"
    result = call_tool("export", *args(run), "--format", fmt, "--dynamic", "--size", "32", "32", "--output", output)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("max abs difference") == 4  # the export size and three more, odd sides among them
    name, work_dir, extra = run
    task, _ = load_trained_task(str(CONFIGS[name]), str(work_dir / "checkpoints" / "iter_2.pth"), [*TINY, *extra])
    draw = torch.Generator().manual_seed(3)
    labels = torch.randint(0, 7, (2, 29, 35), generator=draw).float()
    labels[0, :4, :4] = 255
    noise = torch.randn(2, *task.noise_shape, generator=draw)  # the config's noise_dim
    module, _, _ = task.deployable()
    with torch.no_grad():
        expected = module(labels, noise).numpy()
    exported = run_exported(output, fmt, (labels, noise), "labels")
    assert exported.shape == (2, 3, 29, 35) and np.abs(exported - expected).max() <= 1e-4


def test_samples_and_num_are_refused_where_they_mean_nothing(run, tmp_path):
    result = call_tool("infer", *args(run), "--input", tmp_path / "x.png", "--output", tmp_path / "out", "--num", "3")
    assert result.returncode != 0
    assert "--num: SemanticSynthesisTask draws --samples images from each --input label map" in result.stderr


def test_analyze_model_and_test_run_on_it(run, tmp_path):
    result = call_tool("analyze_model", *args(run), "--size", "32", "32", "--depth", "0", "--json", tmp_path / "a.json")
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "a.json").read_text())
    noise_dim = load_config(CONFIGS[run[0]]).task.generator.noise_dim
    assert report["generator"]["inputs"] == [[1, 7, 32, 32], [1, noise_dim]]
    result = call_tool("test", *args(run), "--work-dir", tmp_path / "test")
    assert result.returncode == 0, result.stderr + result.stdout[-1000:]
    assert "Diversity" in result.stdout


SMALL = [*TINY[:-2], "metrics=[{type: PSNR}]", "train.best_metric=PSNR", "train.val_interval=0", "train.max_iters=4",
         "+task.generator.param_free_norm=instance", "seed=5",
         "optimizers.generator={type: SGD, lr: 0.01, momentum: 0.9, params: generator}",
         "optimizers.discriminator={type: SGD, lr: 0.02, momentum: 0.9, params: discriminator}"]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_resumed_synthesis_run_ends_bit_identical(name, tmp_path):
    import shutil

    import torch
    from test_resume import assert_same_state

    extra = ["task.discriminator.num_layers=2"] if name == "spade" else []
    whole = tmp_path / "whole"
    result = call_tool("train", "--config", CONFIGS[name], "--work-dir", whole, *SMALL, *extra)
    assert result.returncode == 0, result.stderr
    resumed = tmp_path / "resumed"
    (resumed / "checkpoints").mkdir(parents=True)
    shutil.copy(whole / "checkpoints" / "iter_2.pth", resumed / "checkpoints" / "iter_2.pth")
    (resumed / "checkpoints" / "latest").write_text("iter_2.pth")
    result = call_tool("train", "--config", CONFIGS[name], "--work-dir", resumed, "--resume", *SMALL, *extra)
    assert result.returncode == 0, result.stderr
    a, b = (torch.load(d / "checkpoints" / "iter_4.pth", weights_only=True) for d in (whole, resumed))
    for part in ("task", "optim", "rng"):
        assert_same_state(b[part], a[part], part)


def test_accumulation_equals_the_whole_batch_with_the_patch_discriminator(tmp_path):
    import torch

    # no spectral norm: its power iteration runs once per forward, so twice for two micro-batches
    extra = ["task.discriminator.num_layers=2", "task.discriminator.norm=none", "train.ckpt_interval=4",
             "task.generator.spectral_norm=false",
             "data.train.dataset.num_samples=8"]
    results = {}
    for label, batch in (("whole", ["data.train.batch_size=4"]),
                         ("accumulated", ["data.train.batch_size=2", "train.accumulate=2"])):
        result = call_tool("train", "--config", CONFIGS["spade"], "--work-dir", tmp_path / label, *SMALL, *extra, *batch)
        assert result.returncode == 0, result.stderr
        results[label] = torch.load(tmp_path / label / "checkpoints" / "iter_4.pth", weights_only=True)["task"]
    for key, value in results["whole"].items():
        if value.is_floating_point() and key.startswith(("generator.", "discriminator.")):
            torch.testing.assert_close(results["accumulated"][key], value, atol=2e-6, rtol=1e-4, msg=named(key))


def test_two_processes_equal_one_with_the_double_batch(tmp_path):
    """No noise (each rank draws its own, by design) and no spectral norm, so the two runs differ
    only by the order of floating-point sums."""
    import torch

    from support import run_forked_ranks

    extra = ["task.discriminator.num_layers=2", "task.discriminator.norm=none", "train.ckpt_interval=4",
             "task.generator.spectral_norm=false", "task.generator.noise_dim=0", "data.train.dataset.num_samples=8"]
    states = {}
    for label, processes, batch in (("one", 1, 4), ("two", 2, 2)):
        result = run_forked_ranks(processes, "train", "--config", CONFIGS["spade"], "--work-dir", tmp_path / label,
                                  *SMALL, *extra, f"data.train.batch_size={batch}", folder=tmp_path / f"{label}_out")
        assert result.returncode == 0, result.stderr[-3000:]
        states[label] = torch.load(tmp_path / label / "checkpoints" / "iter_4.pth", weights_only=True)["task"]
    for key, value in states["one"].items():
        if value.is_floating_point() and key.startswith(("generator.", "discriminator.")):
            torch.testing.assert_close(states["two"][key], value, atol=2e-6, rtol=1e-4, msg=named(key))


def test_two_processes_train_the_oasis_config_with_its_mode_seeking_term(tmp_path):
    """The shipped OASIS-style config, its mode-seeking term included, on two processes (each rank
    draws its own noise, by design, so no comparison with one process)."""
    from support import run_forked_ranks

    assert load_config(CONFIGS["oasis"]).task.mode_seeking_weight > 0
    result = run_forked_ranks(2, "train", "--config", CONFIGS["oasis"], "--work-dir", tmp_path / "run", *SMALL,
                              "task.generator.spectral_norm=false", "data.train.dataset.num_samples=8",
                              folder=tmp_path / "out")
    assert result.returncode == 0, result.stderr[-3000:]
    logged = (tmp_path / "run" / "train.log").read_text()
    assert "processes 2" in logged and "loss_g_ms" in logged, logged[-2000:]
