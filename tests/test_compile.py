"""`compile:` compiles each trainable network in place: same parameter names, same training."""

import pytest
import torch

from framework.errors import ConfigError
from framework.runtime.compile import check_cpu_compiler, compile_settings
from support import REPO, TINY_UNET, call_tool

CONFIG = REPO / "configs/segmentation/unet_shapes.yaml"
RUN = [*TINY_UNET, "data.train.num_workers=0", "train.max_iters=4", "train.val_interval=0",
       "train.ckpt_interval=4", "train.log_interval=2", "train.progress_bar=false"]


def train(work_dir, *overrides):
    result = call_tool("train", "--config", CONFIG, "--work-dir", work_dir, *RUN, *overrides)
    assert result.returncode == 0, result.stderr
    return torch.load(work_dir / "checkpoints/iter_4.pth", weights_only=True)["task"]


def test_compiled_network_trains_like_the_plain_one(tmp_path):
    from torch._dynamo.utils import counters

    plain = train(tmp_path / "plain")
    counters.clear()
    # aot_eager: dynamo's graph capture and autograd tracing without inductor's C++ build
    # (tens of seconds on a cold CPU cache); the wiring is the same for every backend.
    compiled = train(tmp_path / "compiled", "compile={backend: aot_eager}")
    assert counters["stats"]["unique_graphs"] >= 1  # the UNet's forward really went through dynamo
    assert list(compiled) == list(plain)  # no _orig_mod. prefixes: checkpoints load either way
    for name, value in plain.items():
        # float32 kernels in another order (decomposed ops) after 4 AdamW steps
        torch.testing.assert_close(compiled[name], value, rtol=1e-3, atol=1e-4, msg=name)


def test_compile_setting_is_checked():
    assert compile_settings(False) is None and compile_settings(True) == {}
    assert compile_settings({"mode": "max-autotune"}) == {"mode": "max-autotune"}
    with pytest.raises(ConfigError, match=r"compile\.bakend: unknown key; did you mean 'backend'"):
        compile_settings({"bakend": "inductor"})
    with pytest.raises(ConfigError, match="compile: must be true, false or a mapping"):
        compile_settings("yes")


def test_a_cpu_run_without_a_cpp_compiler_stops_at_start_up_in_one_line(monkeypatch, tmp_path):
    """inductor on a CPU builds C++ at the first step; without a compiler that step ended in a
    99-line traceback (InvalidCxxCompiler). It is found at start-up and named in one line."""
    import torch._inductor.config as inductor_config

    cpu = torch.device("cpu")
    check_cpu_compiler({}, cpu)  # this machine's g++ (CI's too)
    monkeypatch.setattr(inductor_config.cpp, "cxx", (None, "/nonexistent/g++"))
    with pytest.raises(ConfigError, match=r"^compile: the inductor backend builds C\+\+ for a CPU run and found no "
                                          r"working C\+\+ compiler \(tried /nonexistent/g\+\+\); install g\+\+ or "
                                          r"clang\+\+ \(or set CXX to one\), or set compile: false$"):
        check_cpu_compiler({"mode": "max-autotune"}, cpu)
    check_cpu_compiler({"backend": "aot_eager"}, cpu)  # builds no C++
    check_cpu_compiler({}, torch.device("cuda"))  # Triton kernels, no C++ of inductor's
    result = call_tool("train", "--config", CONFIG, "--work-dir", tmp_path, *RUN, "compile=true")
    assert result.returncode == 2 and not (tmp_path / "checkpoints").exists()
    assert result.stderr.strip().splitlines() == [
        "error: compile: the inductor backend builds C++ for a CPU run and found no working C++ compiler (tried "
        "/nonexistent/g++); install g++ or clang++ (or set CXX to one), or set compile: false"]
