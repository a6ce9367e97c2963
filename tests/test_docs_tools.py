"""Every command of the "Using a trained model" section of docs/tools.md (the README's until 0.3.0),
run as written (on the session's tiny UNet run instead of the Quickstart's full one), each tool once."""

import re
import shlex

import cv2
import numpy as np
import pytest
from PIL import Image

from support import REPO, call_tool

onnx = pytest.importorskip("onnx")  # the page exports to ONNX: the [export] extra (also in [dev])


def tools_page_commands() -> list[list[str]]:
    text = (REPO / "docs" / "tools.md").read_text()
    section = text.split("## Using a trained model", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [shlex.split(line) for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def test_each_tools_page_command_runs(unet_run, tmp_path, monkeypatch):
    commands = tools_page_commands()
    tools = [c[1].removeprefix("tools/").removesuffix(".py") for c in commands]
    assert tools == ["infer", "export", "check_dataset", "browse_dataset", "analyze_model", "print_config"]
    monkeypatch.chdir(tmp_path)  # the commands' relative outputs land here
    (tmp_path / "photos").mkdir()
    cv2.imwrite("photos/street.jpg", np.random.default_rng(0).integers(0, 256, (90, 130, 3), dtype=np.uint8))
    real = {"configs/segmentation/unet_shapes.yaml": str(unet_run.config),
            "work_dirs/unet_shapes/checkpoints/best.pth": str(unet_run.checkpoint)}
    for tool, command in zip(tools, commands):
        assert command[0] == "python"
        result = call_tool(tool, *[real.get(arg, arg) for arg in command[2:]])
        assert result.returncode == 0, f"{' '.join(command)}\n{result.stderr}"
    assert Image.open("predictions/masks/street.png").size == (130, 90)
    assert Image.open("predictions/overlays/street.png").size == (130, 90)
    onnx.checker.check_model(onnx.load("unet.onnx"))
    assert (tmp_path / "dataset_report.json").is_file() and (tmp_path / "browse/grid_000.png").is_file()
