"""Mixed precision: float16 with a GradScaler owned by the Optimizers object, bfloat16 on CPU."""

import json

import torch
from torch import nn

from framework.engine.optim import build_optimizers
from support import REPO, TINY_SEGMENTATION, run_tool


class TwoNets(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.generator = nn.Linear(4, 4)
        self.discriminator = nn.Linear(4, 1)


def two_optimizers(task, scaler=None, clip=None):
    entry = {"type": "SGD", "lr": 0.1}
    cfg = {"optimizers": {"generator": {**entry, "params": "generator", **({"clip_grad": clip} if clip else {})},
                          "discriminator": {**entry, "params": "discriminator"}}}
    return build_optimizers(cfg, task, max_iters=10, scaler=scaler)


def snapshot(module):
    return [p.detach().clone() for p in module.parameters()]


def test_inf_gradient_skips_only_that_optimizer_and_halves_the_scale():
    task = TwoNets()
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    optim = two_optimizers(task, scaler)
    x = torch.randn(8, 4)
    g_before, d_before = snapshot(task.generator), snapshot(task.discriminator)

    optim.update(task.discriminator(x).sum() * float("inf"), "discriminator")  # inf gradients
    optim.update(task.generator(x).pow(2).mean(), "generator")
    optim.end_iteration()

    assert all(torch.equal(a, b) for a, b in zip(d_before, snapshot(task.discriminator)))  # skipped
    assert not any(torch.equal(a, b) for a, b in zip(g_before, snapshot(task.generator)))  # stepped
    assert scaler.get_scale() == 512.0
    assert optim.state_dict()["scaler"]["scale"] == 512.0


def test_clipping_sees_unscaled_gradients():
    x = torch.randn(8, 4)
    norms = []
    for scaler in (None, torch.amp.GradScaler("cpu", init_scale=4096.0)):
        task = TwoNets()
        optim = two_optimizers(task, scaler, clip={"max_norm": 1e6})
        optim.update(task.generator(x).pow(2).mean(), "generator")
        norms.append(optim.grad_norms["generator"])
    torch.testing.assert_close(norms[0], norms[1])


def test_bfloat16_autocast_trains_the_quickstart_on_cpu(tmp_path):
    result = run_tool("train", "--config", REPO / "configs/segmentation/unet_shapes.yaml", "--work-dir", tmp_path,
                      *TINY_SEGMENTATION, "train.max_iters=40", "train.val_interval=40",
                      "amp.enabled=true", "amp.dtype=bfloat16")
    assert result.returncode == 0, result.stderr
    losses = [float(line.split("loss ")[1].split()[0]) for line in result.stdout.splitlines() if " loss " in line]
    assert len(losses) == 8 and losses[-1] < losses[0] and all(loss == loss for loss in losses)  # finite, decreasing
    assert json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])["iter"] == 40


def test_float16_run_checkpoints_the_scaler(tmp_path):
    result = run_tool("train", "--config", REPO / "configs/segmentation/unet_shapes.yaml", "--work-dir", tmp_path,
                      *TINY_SEGMENTATION, "train.max_iters=2", "train.val_interval=0", "task.model.base_channels=4",
                      "data.train.dataset.size=32", "amp.enabled=true", "amp.dtype=float16")  # CPU float16 is slow
    assert result.returncode == 0, result.stderr
    state = torch.load(tmp_path / "checkpoints/iter_2.pth", weights_only=True)
    assert state["optim"]["scaler"]["scale"] > 0
