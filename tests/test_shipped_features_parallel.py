"""Two processes (gloo, forked ranks) and bf16 autocast (where the CPU computes it natively) on
every shipped config, as shrunk by tests/test_shipped_features.py's `overrides`."""

import pytest
import torch
from test_shipped_features import OWN_DATA, assert_finite, overrides, trained
from test_tools_walk import SHIPPED, config_id

from framework.runtime.precision import cpu_has_native_bf16
from support import call_tool, run_forked_ranks


@pytest.mark.parametrize("config", OWN_DATA, ids=config_id)
def test_two_processes_train_every_shipped_config(config, tmp_path):
    trains_on_two_processes(config, overrides(config, tmp_path), tmp_path)


def trains_on_two_processes(config, shrunk: list[str], tmp_path) -> None:
    """`config` with the `shrunk` overrides trains an iteration on two processes, its weights finite."""
    result = run_forked_ranks(2, "train", "--config", config, "--work-dir", tmp_path / "run", *shrunk, "metrics=[]",
                              "train.best_metric=null", folder=tmp_path / "ranks")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "processes 2" in (tmp_path / "run/train.log").read_text()
    assert_finite(trained(tmp_path / "run", 1)["task"])


@pytest.mark.skipif(not cpu_has_native_bf16(), reason="this CPU emulates bfloat16 (no AMX-BF16 or AVX512-BF16, "
                    "or ONEDNN_MAX_CPU_ISA caps below them): a step takes 8-9x its float32 time there")
@pytest.mark.parametrize("config", SHIPPED, ids=config_id)
def test_bf16_autocast_trains_every_shipped_config(config, tmp_path):
    result = call_tool("train", "--config", config, "--work-dir", tmp_path / "run", *overrides(config, tmp_path),
                       "metrics=[]", "train.best_metric=null", "amp.enabled=true", "amp.dtype=bfloat16")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "precision bfloat16" in (tmp_path / "run/train.log").read_text()
    state = trained(tmp_path / "run", 1)["task"]
    assert_finite(state)
    assert all(v.dtype != torch.bfloat16 for v in state.values())  # weights stay float32
