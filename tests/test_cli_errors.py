"""User mistakes end in `error: <one line per mistake>` on stderr naming the key, file or value,
exit status 2, no traceback, and a work dir left as it was.

Every bad input runs through the real tools in this process (`call_tool`: the tool's own
argument parsing and `main`, without a new interpreter); one real subprocess checks what only a
process shows (the exit status and stderr of `python tools/train.py`).
"""

import hashlib
import shutil
import textwrap

import cv2
import numpy as np
import pytest
import torch

from framework.data.loader import build_dataloader
from framework.errors import ConfigError
from support import REPO, TINY_UNET, call_tool, run_forked_ranks, run_tool

CONFIG = REPO / "configs/segmentation/unet_shapes.yaml"
RUN = [*TINY_UNET, "data.train.num_workers=0", "train.max_iters=2", "train.ckpt_interval=2", "train.val_interval=0"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished tiny run (its checkpoint is of the TINY_UNET config) and files made from it."""
    work_dir = tmp_path_factory.mktemp("trained")
    result = call_tool("train", "--config", CONFIG, "--work-dir", work_dir, *RUN)
    assert result.returncode == 0, result.stderr
    task = torch.load(work_dir / "checkpoints/iter_2.pth", weights_only=True)["task"]
    counters = {k: v for k, v in task.items() if k.endswith("num_batches_tracked")}
    assert counters and len(counters) < len(task)
    torch.save(counters, work_dir.parent / "bn_counters_only.pth")
    (work_dir.parent / "random_bytes.pth").write_bytes(np.random.default_rng(0).bytes(4096))
    (work_dir.parent / "bad.yaml").write_text("task: {type: SegmentationTask\n")
    return work_dir


def snapshot(folder):
    """{relative path: sha1} of the files under `folder` (None when it does not exist). Log files
    are left out: a failed start may log that it started."""
    if not folder.exists():
        return None
    return {str(p.relative_to(folder)): hashlib.sha1(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.suffix != ".log"}


def assert_clear_error_lines(result, needles, lines=1):
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    errors = result.stderr.strip().splitlines()
    assert len(errors) == lines and all(line.startswith("error: ") for line in errors), result.stderr
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)


def T(*overrides):
    """Training the tiny run with `overrides` in a fresh work dir."""
    return ["train", "--config", CONFIG, "--work-dir", "{fresh}", *RUN, *overrides]


# (id, argv with {fresh}/{run}/{files} placeholders, substrings of the error, number of error lines)
BAD_INPUTS = [
    ("lr-not-a-number", T("optim.lr=abc"), ["optim.lr: expected a finite number > 0, got 'abc'"], 1),
    ("lr-infinite", T("optim.lr=.inf"), ["optim.lr: expected a finite number > 0, got inf"], 1),
    ("lr-negative", T("optim.lr=-0.1"), ["optim.lr", "-0.1"], 1),
    ("max-iters-text", T("train.max_iters=abc"), ["train.max_iters: expected an integer >= 1, got 'abc'"], 1),
    ("max-iters-list", T("train.max_iters=[1,2]"), ["train.max_iters", "[1, 2]"], 1),
    ("max-iters-negative", T("train.max_iters=-5"), ["train.max_iters", "got -5"], 1),
    ("max-iters-zero", T("train.max_iters=0"), ["train.max_iters", "got 0"], 1),
    ("max-iters-fraction", T("train.max_iters=3.5"), ["train.max_iters", "got 3.5"], 1),
    ("max-epochs-zero", T("train.max_iters=null", "train.max_epochs=0"), ["train.max_epochs", "got 0"], 1),
    ("max-iters-and-epochs", T("train.max_epochs=3"), ["train.max_iters (2) and train.max_epochs (3) are both set"], 1),
    ("neither-iters-nor-epochs", T("train.max_iters=null"), ["set train.max_iters or train.max_epochs"], 1),
    ("val-interval-negative", T("train.val_interval=-1"), ["train.val_interval", "got -1"], 1),
    ("num-workers-negative", T("data.train.num_workers=-1"), ["data.train.num_workers", "got -1"], 1),
    ("batch-size-zero", T("data.train.batch_size=0"), ["data.train.batch_size", "got 0"], 1),
    ("clip-grad-typo", T("+optim.clip_grad={max_nrom: 1.0}"),
     ["unknown key 'optim.clip_grad.max_nrom'; did you mean 'max_norm'", "optim.clip_grad.max_norm: missing"], 2),
    ("clip-grad-not-a-mapping", T("+optim.clip_grad=1.0"), ["optim.clip_grad: expected a mapping, got 1.0"], 1),
    ("seed-text", T("seed=abc"), ["seed: expected an integer >= 0 and <= 9223372036854775807, got 'abc'"], 1),
    ("seed-too-large", T("seed=18446744073709551616"), ["seed: expected an integer >= 0 and <= 9223372036854775807, "
                                                        "got 18446744073709551616"], 1),
    ("accumulate-zero", T("train.accumulate=0"), ["train.accumulate", "got 0"], 1),
    ("device-name", T("device=gpu"), ["device: 'gpu' is not a device (use auto, cpu, cuda or cuda:N)"], 1),
    ("amp-dtype", T("amp.dtype=fp8"), ["amp.dtype: expected 'float16' or 'bfloat16', got 'fp8'"], 1),
    ("auto-resume", T("auto_resume=maybe"), ["auto_resume: expected true or false or 'auto', got 'maybe'"], 1),
    ("best-mode", T("train.best_mode=best"), ["train.best_mode: expected 'auto' or 'max' or 'min', got 'best'"], 1),
    ("keep-last-negative", T("train.keep_last=-1"), ["train.keep_last", "got -1"], 1),
    ("timeout-zero", T("dist.timeout=0"), ["dist.timeout: expected a number > 0, got 0"], 1),
    ("progress-bar", T("train.progress_bar=sometimes"), ["train.progress_bar", "'sometimes'"], 1),
    ("train-key-typo", T("+train.max_iter=3"), ["unknown key 'train.max_iter'; did you mean 'max_iters'"], 1),
    ("metric-without-type", T("metrics=[{num_classes: 4}]"), ["metrics[0]: expected a component node"], 1),
    ("load-from-key-typo", T("load_from={checkpont: x.pth}"),
     ["load_from.checkpoint: missing", "unknown key 'load_from.checkpont'"], 2),
    ("every-mistake-at-once", T("optim.lr=abc", "seed=-1", "train.val_interval=x", "amp.enabled=maybe"),
     ["optim.lr", "seed", "train.val_interval", "amp.enabled"], 4),
    ("overrides-before-and-after-options", ["train", "--config", CONFIG, *RUN, "--work-dir", "{fresh}",
                                            "train.max_iters=abc"], ["train.max_iters", "'abc'"], 1),
    ("invalid-yaml", ["train", "--config", "{files}/bad.yaml", "--work-dir", "{fresh}"], ["bad.yaml", "invalid YAML"], 1),
    ("custom-import-missing", T("custom_imports=[no_such_module_here]"),
     ["custom_imports: cannot import 'no_such_module_here'", "a file path such as ./my_modules.py"], 1),
    ("custom-import-file-missing", T("custom_imports=[./no_such_file.py]"),
     ["custom_imports: file not found", "no_such_file.py"], 1),
    ("dataset-smaller-than-batch", T("data.train.dataset.num_samples=1", "data.train.batch_size=2"),
     ["data.train: 1 samples per process is fewer than batch_size 2"], 1),
    ("resume-directory", T("--resume", "{run}"), ["is a directory, not a checkpoint file"], 1),
    ("resume-nothing", T("--resume"), ["--resume: no checkpoint to resume from"], 1),
    ("load-from-only-bn-counters", T("load_from={files}/bn_counters_only.pth"),
     ["no tensor but BatchNorm num_batches_tracked counters matched"], 1),
    ("test-checkpoint-of-another-config", ["test", "--config", CONFIG, "--checkpoint", "{run}/checkpoints/iter_2.pth",
                                           "--work-dir", "{fresh}", "device=cpu"],
     ["iter_2.pth does not fit this config's task"], 1),
    ("test-random-bytes", ["test", "--config", CONFIG, "--checkpoint", "{files}/random_bytes.pth",
                           "--work-dir", "{fresh}", *TINY_UNET],
     ["random_bytes.pth: not a PyTorch checkpoint, or a corrupt or truncated one"], 1),
    ("test-missing-checkpoint", ["test", "--config", CONFIG, "--checkpoint", "{files}/nope.pth",
                                 "--work-dir", "{fresh}", *TINY_UNET], ["checkpoint not found", "nope.pth"], 1),
]


def fill(text, values) -> str:
    """`text` with {fresh}, {run} and {files} replaced (other braces are YAML)."""
    text = str(text)
    for name, value in values.items():
        text = text.replace(f"{{{name}}}", str(value))
    return text


@pytest.mark.parametrize("argv, needles, lines", [row[1:] for row in BAD_INPUTS], ids=[row[0] for row in BAD_INPUTS])
def test_bad_input_is_one_clear_line_per_mistake_and_leaves_the_work_dir_alone(trained, tmp_path, argv, needles, lines):
    fresh = tmp_path / "fresh"
    values = {"fresh": fresh, "run": trained, "files": trained.parent}
    argv = [fill(a, values) for a in argv]
    before = snapshot(trained)
    result = call_tool(argv[0], *argv[1:])
    assert_clear_error_lines(result, [fill(n, values) for n in needles], lines)
    assert snapshot(fresh) in (None, {}), snapshot(fresh)  # no config.yaml, checkpoint or event file
    assert snapshot(trained) == before


def test_a_config_error_in_a_real_process_exits_2_with_one_line(tmp_path):
    result = run_tool("train", "--config", CONFIG, "--work-dir", tmp_path / "wd", "train.max_iters=abc")
    assert_clear_error_lines(result, ["train.max_iters: expected an integer >= 1, got 'abc'"])
    assert not (tmp_path / "wd").exists()


def test_one_sample_on_two_processes_is_a_config_error():
    section = {"dataset": {"type": "SyntheticShapes", "num_samples": 1, "size": 32}, "batch_size": 1}
    for rank in (0, 1):
        with pytest.raises(ConfigError, match=r"data.train: 0 samples per process of 1 on 2 processes is fewer "
                                              r"than batch_size 1"):
            build_dataloader(section, "data.train", train=True, rank=rank, world_size=2)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_gpu_asked_for_on_a_machine_without_one_is_a_config_error_on_every_rank(tmp_path):
    """Under torchrun, `device: cuda` would pick NCCL, whose set-up fails on a machine without
    CUDA with torch's own error: the device is checked first, one line per rank, nothing written."""
    result = run_forked_ranks(2, "train", "--config", CONFIG, "--work-dir", tmp_path / "wd", *RUN, "device=cuda",
                              folder=tmp_path / "out")
    assert result.exit_codes == [2, 2], result.stderr
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert errors == ["error: device: 'cuda:0' asked for, but CUDA is not available on this machine",
                      "error: device: 'cuda:1' asked for, but CUDA is not available on this machine"], result.stderr
    assert not (tmp_path / "wd").exists()


def test_garbage_in_latest_falls_back_to_the_newest_checkpoint(trained, tmp_path):
    run = shutil.copytree(trained, tmp_path / "run")
    (run / "checkpoints/latest").write_bytes(b"\xff\xfe\x00garbage\x80")
    result = call_tool("train", "--config", CONFIG, "--work-dir", run, "--resume", *RUN, "train.max_iters=3")
    assert result.returncode == 0, result.stderr
    assert "does not name a checkpoint (iter_<N>.pth); ignoring it" in result.stdout + result.stderr
    assert "resumed from" in result.stdout and "iter_2.pth at iteration 2" in result.stdout
    assert (run / "checkpoints/latest").read_text() == "iter_3.pth"


def write_config(tmp_path, body: str):
    path = tmp_path / "cfg.yaml"
    path.write_text(f"_base_: [{CONFIG}]\n" + textwrap.dedent(body))
    return path


@pytest.mark.parametrize("overrides, needles", [
    (["task.model.type=UNett"], ["task.model.type", "UNett", "'UNet'"]),
    (["+task.model.widht=3"], ["task.model.widht", "UNet", "accepts:"]),
    (["optim.lrr=0.1"], ["optim.lrr", "did you mean 'lr'"]),
])
def test_bad_component_names_and_keywords(tmp_path, overrides, needles):
    result = call_tool("train", "--config", CONFIG, "--work-dir", tmp_path, *RUN, *overrides)
    assert_clear_error_lines(result, needles)


def test_unknown_top_level_key(tmp_path):
    result = call_tool("train", "--config", write_config(tmp_path, "optimizer: {type: SGD}\n"))
    assert_clear_error_lines(result, ["unknown top-level key 'optimizer'", "did you mean"])


def test_missing_config_file(tmp_path):
    result = call_tool("train", "--config", tmp_path / "nope.yaml")
    assert_clear_error_lines(result, ["config file not found", "nope.yaml"])


def test_missing_data_folder(tmp_path):
    config = write_config(tmp_path, f"""
        data:
          train:
            dataset: {{type: VOCSegmentation, root: {tmp_path / 'VOCnope'}}}
        """)
    result = call_tool("train", "--config", config, "--work-dir", tmp_path, "train.max_iters=2", "device=cpu")
    assert_clear_error_lines(result, ["data.train.dataset", "VOCnope"])


def test_mask_values_out_of_range_name_file_and_values(tmp_path):
    root = tmp_path / "folder"
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    rng = np.random.default_rng(0)
    for i in range(8):
        cv2.imwrite(str(root / "images" / f"{i:02d}.png"), rng.integers(0, 255, (64, 64, 3), dtype=np.uint8))
        mask = np.zeros((64, 64), np.uint8)
        if i == 5:
            mask[:4, :4] = 7
            mask[10, 10] = 9
        cv2.imwrite(str(root / "masks" / f"{i:02d}.png"), mask)
    config = write_config(tmp_path, f"""
        data:
          train:
            dataset: {{type: ImageMaskFolder, root: {root}, classes: [a, b, c, d]}}
            shuffle: false
        """)
    result = call_tool("train", "--config", config, "--work-dir", tmp_path / "wd", "train.max_iters=4", "device=cpu",
                       "data.train.batch_size=2", "data.train.num_workers=1", "train.val_interval=0")
    assert_clear_error_lines(result, ["05.png", "7", "9"])
