"""Every command of README.md runs: the first block installs and trains the Quickstart (the
training runs with the examples), the second is CI's (.ci/run runs it verbatim), the segmentation and GAN examples run as written in a fresh folder, shrunk to a tiny
network and a few iterations by the same overrides appended to each command of a config."""

import re
import shlex

import cv2
import numpy as np
from conftest import TINY_PIX2PIX_RUN, TINY_UNET_RUN
from PIL import Image

from support import REPO, call_tool

TINY = {"unet_shapes": TINY_UNET_RUN, "pix2pix_shapes": TINY_PIX2PIX_RUN}


def readme_lines() -> list[str]:
    """Each command line of the README's bash blocks, in order (continuation lines joined)."""
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    return [" ".join(line.split()) for block in blocks for line in block.replace("\\\n", " ").splitlines()
            if line.strip()]


QUICKSTART = "python tools/train.py --config configs/segmentation/unet_shapes.yaml"


def example_lines() -> list[str]:
    """The commands the examples test runs: the Quickstart of the first block (after its install),
    then every command after the test block."""
    set_up, _, *examples = readme_lines()
    return [set_up.split(" && ", 1)[1], *examples]


def test_readme_is_short_and_its_set_up_commands_are_what_ci_runs():
    assert len((REPO / "README.md").read_text().splitlines()) <= 200
    set_up, test, *examples = readme_lines()
    # the first block is the whole set-up: install, then train the Quickstart
    assert set_up == f"pip install -e . && {QUICKSTART}"
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert test == ci, "README's test command must be .ci/run's last line, verbatim"
    assert ci.startswith('pip install -e ".[dev]" ')  # CI installs a superset
    assert all(line.startswith("python tools/") for line in examples), "a README command that no test runs"


def test_readme_examples_run_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # work_dirs/<config name> and the examples' folders land here
    rng = np.random.default_rng(0)
    for folder in ("photos", "label_maps"):
        (tmp_path / folder).mkdir()
        cv2.imwrite(f"{folder}/img.png", rng.integers(0, 256, (32, 48, 3), dtype=np.uint8))
    examples = [shlex.split(line) for line in example_lines()]
    assert [c[1] for c in examples] == ["tools/train.py", "tools/test.py", "tools/infer.py",
                                        "tools/train.py", "tools/infer.py"]
    for command in examples:
        tool = command[1].removeprefix("tools/").removesuffix(".py")
        args = [str(REPO / a) if a.endswith(".yaml") else a for a in command[2:]]  # configs from the repo
        # the same overrides for every tool on a config: the tiny network must match its checkpoint
        args += TINY[command[command.index("--config") + 1].rsplit("/", 1)[1].removesuffix(".yaml")]
        result = call_tool(tool, *args)
        assert result.returncode == 0, f"{' '.join(command)}\n{result.stderr}"
    assert Image.open("predictions/masks/img.png").size == (48, 32)
    assert Image.open("translated/img.png").size == (48, 32)
