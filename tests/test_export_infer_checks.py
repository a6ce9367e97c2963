"""What tools/export.py and tools/infer.py refuse: non-finite weights and outputs, a dynamic
export that does not follow the input size, results that would overwrite each other, option
values no run can use, and folders that cannot be written."""

import importlib.util
import subprocess

import cv2
import numpy as np
import pytest
import torch

from framework.checkpoint import files as ckpt
from framework.engine.trained import load_trained_task
from framework.errors import ConfigError
from support import REPO, call_tool

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning")
ENCODER_UNET = [REPO / "configs/segmentation/encoder_unet_resnet34_shapes.yaml",
                "task.model.encoder=resnet18", "task.model.encoder_weights=null"]  # random weights


def changed_checkpoint(run, folder, change):
    """A copy of `run`'s checkpoint with `change(task_state)` applied."""
    state = ckpt.load_checkpoint(run.checkpoint)
    change(state["task"])
    path = folder / "changed.pth"
    torch.save(state, path)
    return path


def first_weight(state):
    return next(k for k, v in state.items() if v.is_floating_point() and v.dim() == 4)


def one_line_error(result, code, *needles):
    assert result.returncode == code, result.stderr + result.stdout[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_export_and_infer_refuse_nan_weights(unet_run, tmp_path):
    nan = changed_checkpoint(unet_run, tmp_path, lambda s: s[first_weight(s)][0].fill_(float("nan")))
    (tmp_path / "in").mkdir()
    assert cv2.imwrite(str(tmp_path / "in/a.png"), np.zeros((32, 32, 3), np.uint8))
    out = tmp_path / "out"
    export = call_tool("export", "--config", unet_run.config, "--checkpoint", nan, "--format", "torchscript",
                       "--output", out / "model.pt")
    infer = call_tool("infer", "--config", unet_run.config, "--checkpoint", nan, "--input", tmp_path / "in",
                      "--output", out)
    for result in (export, infer):
        one_line_error(result, 2, f"{nan}: the weights are not finite (NaN or inf in task.model.")
    assert not out.exists()


def test_export_fails_on_non_finite_outputs_and_leaves_no_file(unet_run, tmp_path):
    # Finite weights whose outputs overflow: PyTorch and the export agree (both inf/NaN), and
    # a NaN difference is never "> atol", so only an explicit check catches it
    huge = changed_checkpoint(unet_run, tmp_path, lambda s: s[first_weight(s)].fill_(3e38))
    out = tmp_path / "out"
    out.mkdir()
    result = call_tool("export", "--config", unet_run.config, "--checkpoint", huge, "--format", "torchscript",
                       "--output", out / "model.pt", "--size", "32", "32")
    one_line_error(result, 1, "non-finite outputs on input (1, 3, 32, 32)", f"nothing written to {out / 'model.pt'}")
    assert list(out.iterdir()) == []


def test_dynamic_export_of_an_encoder_unet_is_exact_away_from_the_traced_size(tmp_path):
    # The network pads to its output stride (32) inside; a trace that froze the 64x64 padding
    # differed by ~1e-2 at 80x72
    output = tmp_path / "model.pt"
    config, *overrides = ENCODER_UNET
    result = call_tool("export", "--config", config, "--format", "torchscript", "--dynamic", "--size", "64", "64",
                       "--output", output, *overrides)
    assert result.returncode == 0, result.stderr
    checked = [line for line in result.stdout.splitlines() if "max abs difference" in line]
    assert [line.split("input ")[1].split(":")[0] for line in checked] == [
        "(1, 3, 64, 64)", "(2, 3, 80, 72)", "(1, 3, 81, 105)", "(2, 3, 33, 31)"]
    task, _ = load_trained_task(config, None, overrides)
    exported = torch.jit.load(str(output))
    generator = torch.Generator().manual_seed(3)
    for height, width in [(80, 72), (47, 33), (96, 96)]:  # checked here independently of the tool
        images = torch.randint(0, 256, (2, 3, height, width), generator=generator).float()
        with torch.no_grad():
            expected = task.model(task.normalize(images))
            torch.testing.assert_close(exported(images), expected, rtol=0, atol=1e-5)


def test_a_failed_export_check_leaves_no_file(unet_run, tmp_path):
    # onnxruntime and PyTorch round differently: no difference is <= 0
    pytest.importorskip("onnxruntime")
    out = tmp_path / "out"
    result = call_tool("export", *unet_run.args(), "--format", "onnx", "--output", out / "model.onnx",
                       "--size", "32", "32", "--atol", "0")
    one_line_error(result, 1, "differs from PyTorch by", "> --atol 0", f"nothing written to {out / 'model.onnx'}")
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("option, message", [
    (["--size", "0", "0"], "--size: expected an integer >= 1 and <= 16384, got 0"),
    (["--batch", "0"], "--batch: expected an integer >= 1 and <= 4096, got 0"),
    (["--atol", "nan"], "--atol: expected a finite number >= 0, got nan"),
])
def test_export_refuses_option_values_it_cannot_use(unet_run, tmp_path, option, message):
    result = call_tool("export", *unet_run.args(), "--format", "torchscript", "--output", tmp_path / "m.pt", *option)
    one_line_error(result, 2, message)
    assert list(tmp_path.iterdir()) == []


def test_infer_refuses_inputs_that_would_write_the_same_result(unet_run, tmp_path):
    for name in ("one/x.png", "one/x.jpg", "two/x.png", "two/y.png"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        assert cv2.imwrite(str(tmp_path / name), np.full((32, 32, 3), 7, np.uint8))
    out = tmp_path / "out"
    result = call_tool("infer", *unet_run.args(), "--input", tmp_path / "one", tmp_path / "two", "--output", out)
    one_line_error(result, 2, f"--input: {tmp_path / 'one/x.jpg'}, {tmp_path / 'one/x.png'}, "
                              f"{tmp_path / 'two/x.png'} would all be written as x.png")
    assert not out.exists()
    # the same file named twice is one input, not a clash
    result = call_tool("infer", *unet_run.args(), "--input", tmp_path / "two", tmp_path / "two/y.png",
                       "--output", out)
    assert result.returncode == 0, result.stderr
    assert "2 images" in result.stdout and sorted(p.name for p in (out / "masks").iterdir()) == ["x.png", "y.png"]


@pytest.mark.parametrize("option, message", [
    (["--batch-size", "0"], "--batch-size: expected an integer >= 1 and <= 4096, got 0"),
    (["--tile-batch", "0"], "--tile-batch: expected an integer >= 1 and <= 4096, got 0"),
    (["--seed", "-1"], "--seed: expected an integer >= 0 and <= 9223372036854775807, got -1"),
    (["--scales", "1", "inf"], "--scales: expected a finite number > 0 and <= 8, got inf"),
])
def test_infer_refuses_option_values_it_cannot_use(unet_run, tmp_path, option, message):
    result = call_tool("infer", *unet_run.args(), "--input", tmp_path / "x.png", "--output", tmp_path / "o", *option)
    one_line_error(result, 2, message)


@pytest.fixture
def read_only_folder(tmp_path):
    """A folder that even root cannot write into: a tmpfs remounted read-only."""
    mount = tmp_path / "ro"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    (mount / "out").mkdir()
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
    yield mount / "out"
    subprocess.run(["umount", str(mount)], check=False)


def test_a_png_into_a_read_only_folder_is_one_line_and_exit_1(pix2pix_run, read_only_folder, tmp_path):
    (tmp_path / "in").mkdir()
    assert cv2.imwrite(str(tmp_path / "in/a.png"), np.zeros((32, 32, 3), np.uint8))
    result = call_tool("infer", *pix2pix_run.args(), "--input", tmp_path / "in", "--output", read_only_folder)
    one_line_error(result, 1)
    assert result.stderr.strip() == f"error: {read_only_folder / 'a.png'}: Read-only file system"


@pytest.mark.parametrize("tool, options, named", [
    ("export", ["--format", "torchscript", "--output", "{blocked}/m.pt", "--size", "32", "32"], "{blocked}/m.pt"),
    ("infer", ["--input", "{images}", "--output", "{blocked}/out"], "{blocked}/out"),
    ("test", ["--work-dir", "{blocked}/out"], "{blocked}/out"),
    ("analyze_model", ["--json", "{blocked}/report.json", "--size", "32", "32"], "{blocked}/report.json"),
])
def test_an_unwritable_folder_is_exit_1_naming_it_in_every_tool(unet_run, tmp_path, tool, options, named):
    blocked = tmp_path / "a_file"  # a folder below a file: not writable, even for root
    blocked.write_text("")
    (tmp_path / "in").mkdir()
    assert cv2.imwrite(str(tmp_path / "in/a.png"), np.zeros((32, 32, 3), np.uint8))
    fill = {"blocked": blocked, "images": tmp_path / "in"}
    args = ["--config", unet_run.config] + (["--checkpoint", unet_run.checkpoint] if tool != "analyze_model" else [])
    result = call_tool(tool, *args, *[o.format(**fill) for o in options])
    assert result.returncode == 1, result.stderr
    assert result.stderr == f"error: {named.format(**fill)}: Not a directory\n"


def infer_tool_module():
    """tools/infer.py as a module (the tools are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location("tools_infer_module", REPO / "tools" / "infer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_exactly_two_inputs_with_one_stem_are_refused_and_one_file_twice_is_not(tmp_path):
    distinct_inputs = infer_tool_module().distinct_inputs
    for name in ("a/x.png", "b/x.jpg", "b/y.png"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    # two files, one result name: the smallest clash
    with pytest.raises(ConfigError) as error:
        distinct_inputs([tmp_path / "a/x.png", tmp_path / "b/x.jpg"])
    assert str(error.value) == (f"--input: {tmp_path / 'a/x.png'}, {tmp_path / 'b/x.jpg'} would all be written as "
                                "x.png; give them in separate runs with different --output folders, or rename them")
    # two spellings of one file: one input, no clash; two stems: two inputs
    assert distinct_inputs([tmp_path / "a/x.png", tmp_path / "a/../a/x.png"]) == [tmp_path / "a/x.png"]
    assert distinct_inputs([tmp_path / "a/x.png", tmp_path / "b/y.png"]) == [tmp_path / "a/x.png",
                                                                             tmp_path / "b/y.png"]
