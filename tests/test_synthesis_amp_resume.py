"""SemanticSynthesisTask under mixed precision and stopped by a signal, with both discriminators
(SPADE's multi-scale PatchGAN with hinge and feature matching; OASIS's segmenter with LabelMix):

- bfloat16: inside an iteration both networks compute in bfloat16 while the losses, the weights
  and the EMA copy stay float32; a run through tools/train.py trains (finite losses, G and D
  move) and differs from the float32 run by the rounding alone.
- float16: one GradScaler for G and D (as tests/test_amp.py for two optimizers): an overflow in
  one network's gradients skips that network's step only and halves the scale; a float16 run
  resumed from its middle checkpoint ends bit-identical, the scaler included (tests/test_cuda.py
  does the same for pix2pix on a GPU).
- SIGTERM mid-run (as tests/test_resume.py for segmentation and pix2pix): exit 143, a checkpoint
  at the iteration it stopped at; resumed with --resume, every iteration's losses and the final
  task, optimizer and random states equal those of a run never stopped.
"""

import re
import signal

import pytest
import torch
from test_resume import assert_same_state, interrupt_near
from test_synthesis_task import CLASSES, batch, generator, patch_discriminator, segmenter_discriminator
from test_synthesis_tools import CONFIGS, SMALL

from framework.losses.feature_matching import FeatureMatchingLoss
from framework.optim.optimizers import build_optimizers
from framework.tasks.synthesis import SemanticSynthesisTask
from probes import read_losses
from support import REPO, call_tool, fork_tool, named


def synthesis_task(name: str) -> SemanticSynthesisTask:
    torch.manual_seed(0)
    if name == "spade":
        return SemanticSynthesisTask(generator(), patch_discriminator(), CLASSES, gan_loss="hinge",
                                     feature_matching=FeatureMatchingLoss(10.0), ema_decay=0.5)
    return SemanticSynthesisTask(generator(), segmenter_discriminator(), CLASSES, gan_loss="oasis",
                                 labelmix_weight=10.0, ema_decay=0.5)


LR = 0.05


def sgd(task, scaler=None):
    entry = {"type": "SGD", "lr": LR, "momentum": 0.9}
    return build_optimizers({"optimizers": {"generator": {**entry, "params": "generator"},
                                            "discriminator": {**entry, "params": "discriminator"}}},
                            task, max_iters=10, scaler=scaler)


def record_output_dtypes(network, seen: list):
    """Every floating tensor `network` returns (a segmenter's logits, a PatchGAN's logits and
    features), by dtype, into `seen`."""
    def tensors(value):
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            for part in value:
                yield from tensors(part)

    def hook(module, inputs, output):
        seen.extend(t.dtype for t in tensors(output) if t.is_floating_point())
    return network.register_forward_hook(hook)


def snapshot(network):
    return [p.detach().clone() for p in network.parameters()]


def changed(before, network):
    return [not torch.equal(a, b) for a, b in zip(before, network.parameters())]


def assert_stepped(before, network):
    """SGD's first step moved each parameter by -lr x its gradient (unscaled: the one the update
    saw), and some parameter moved (a tiny gradient may move a weight by less than its rounding;
    a hinge PatchGAN's last bias gets exactly 0)."""
    for (name, param), old in zip(network.named_parameters(), before):
        torch.testing.assert_close(param.detach(), old - LR * param.grad, rtol=1e-6, atol=1e-9, msg=named(name))
    assert any(changed(before, network))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_bfloat16_autocast_computes_both_networks_in_bfloat16_and_keeps_float32_state(name):
    task, generator_dtypes, discriminator_dtypes = synthesis_task(name), [], []
    record_output_dtypes(task.generator, generator_dtypes)
    record_output_dtypes(task.discriminator, discriminator_dtypes)
    g_before, d_before = snapshot(task.generator), snapshot(task.discriminator)
    optim = sgd(task)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # as the Trainer runs an iteration
        logs = task.train_iteration([batch()], optim)
    optim.end_iteration()
    # D judges the real and the fake, the mixture under LabelMix, and the fake for G's step
    assert len(discriminator_dtypes) >= 3 and set(discriminator_dtypes) == {torch.bfloat16}
    assert generator_dtypes and set(generator_dtypes) == {torch.bfloat16}
    assert {"loss_d", "loss_g", "loss_g_adv"} <= set(logs) and ("loss_g_fm" in logs) == (name == "spade")
    assert all(value.dtype == torch.float32 and torch.isfinite(value) for value in logs.values()), logs
    assert_stepped(g_before, task.generator)
    assert_stepped(d_before, task.discriminator)
    assert all(t.dtype == torch.float32 for t in task.state_dict().values() if t.is_floating_point())


def train(name, work_dir, *overrides):
    extra = ["task.discriminator.num_layers=2"] if name == "spade" else []
    result = call_tool("train", "--config", CONFIGS[name], "--work-dir", work_dir, *SMALL, *extra, *overrides)
    assert result.returncode == 0, result.stderr + result.stdout[-2000:]
    return result


def checkpoint(work_dir, iteration):
    return torch.load(work_dir / f"checkpoints/iter_{iteration}.pth", weights_only=True)


def logged_losses(stdout: str) -> list[float]:
    return [float(word) for line in stdout.splitlines() if " iter " in line
            for key, word in zip(line.split(), line.split()[1:]) if key in ("loss_d", "loss_g")]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_bfloat16_run_trains_both_networks_and_differs_from_the_float32_run(name, tmp_path):
    result = train(name, tmp_path / "bf16", "amp.enabled=true", "amp.dtype=bfloat16")
    assert "precision bfloat16" in result.stdout
    losses = logged_losses(result.stdout)
    assert len(losses) == 2 * 4 and all(torch.isfinite(torch.tensor(losses)))
    middle, end = checkpoint(tmp_path / "bf16", 2), checkpoint(tmp_path / "bf16", 4)
    moved = {key.split(".")[0] for key, value in end["task"].items() if not torch.equal(value, middle["task"][key])}
    assert {"generator", "discriminator"} <= moved
    assert all(v.dtype == torch.float32 for v in end["task"].values() if v.is_floating_point())

    train(name, tmp_path / "fp32", "amp.enabled=false")
    float32 = checkpoint(tmp_path / "fp32", 4)["task"]
    differ = [key for key, value in end["task"].items() if not torch.equal(value, float32[key])]
    assert any(key.startswith("generator.") for key in differ) and any(k.startswith("discriminator.") for k in differ)


@pytest.mark.parametrize("overflowing", ["generator", "discriminator"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_float16_overflow_skips_only_that_networks_step_and_halves_the_scale(name, overflowing):
    """One parameter's gradient made infinite (as a float16 overflow makes it): the GradScaler
    skips the step of the optimizer holding it; the other network steps; the scale halves once."""
    task = synthesis_task(name)
    other = "discriminator" if overflowing == "generator" else "generator"
    scaler = torch.amp.GradScaler("cpu", init_scale=256.0)  # low enough that nothing else overflows
    optim = sgd(task, scaler)
    first = next(getattr(task, overflowing).parameters())
    first.register_hook(lambda grad: grad * float("inf"))
    before = {net: snapshot(getattr(task, net)) for net in (overflowing, other)}
    with torch.autocast("cpu", dtype=torch.float16):
        logs = task.train_iteration([batch()], optim)
    optim.end_iteration()
    assert all(torch.isfinite(value) for value in logs.values()), logs  # the losses are finite; a gradient is not
    assert not any(changed(before[overflowing], getattr(task, overflowing)))
    assert_stepped(before[other], getattr(task, other))
    assert scaler.get_scale() == 128.0
    norms = optim.take_grad_norms()
    assert not torch.isfinite(norms[overflowing]) and torch.isfinite(norms[other])


FLOAT16 = ["amp.enabled=true", "amp.dtype=float16", "train.max_iters=6", "train.ckpt_interval=3", "train.keep_last=0"]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_float16_run_resumed_from_its_middle_ends_bit_identical(name, tmp_path):
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    result = train(name, whole, *FLOAT16)
    assert "precision float16" in result.stdout
    train(name, resumed, *FLOAT16, "--resume", whole / "checkpoints/iter_3.pth")
    middle, end, again = checkpoint(whole, 3), checkpoint(whole, 6), checkpoint(resumed, 6)
    assert "scaler" in end["optim"]  # compared below with the resumed run's
    moved = {key.split(".")[0] for key, value in end["task"].items() if not torch.equal(value, middle["task"][key])}
    assert {"generator", "discriminator"} <= moved  # both trained after the resume point
    for part in ("task", "optim", "rng"):
        assert_same_state(again[part], end[part], part)


STOPPED = [*SMALL, "train.max_iters=8", "train.ckpt_interval=3", "train.keep_last=0", "deterministic=true",
           "custom_imports=[probes]"]


def fork_train(name, work_dir, *extra, delay=0.0):
    layers = ["task.discriminator.num_layers=2"] if name == "spade" else []
    hook = f"hooks=[{{type: LossRecorderHook, path: '{work_dir / 'losses.txt'}', delay: {delay}}}]"
    return fork_tool("train", "--config", CONFIGS[name], "--work-dir", work_dir, *STOPPED, *layers, hook, *extra,
                     cwd=REPO / "tests", log=work_dir / "console.log")


@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_run_stopped_by_sigterm_resumes_bit_identical(name, tmp_path):
    reference_dir, stopped_dir = tmp_path / "reference", tmp_path / "stopped"
    reference_dir.mkdir(), stopped_dir.mkdir()
    reference = fork_train(name, reference_dir)  # runs alongside
    process = fork_train(name, stopped_dir, delay=0.05)
    status = interrupt_near(process, stopped_dir / "losses.txt", 4, signal.SIGTERM)
    log = (stopped_dir / "console.log").read_text()
    assert status == 143, log[-2000:]
    stop = re.search(r"stopped by SIGTERM at iteration (\d+): saved", log)
    assert stop, log[-2000:]
    stopped_at = int(stop.group(1))
    assert 4 <= stopped_at < 8 and (stopped_dir / f"checkpoints/iter_{stopped_at}.pth").exists()

    final = fork_train(name, stopped_dir, "--resume")
    for run, folder in ((final, stopped_dir), (reference, reference_dir)):
        run.join(300)
        assert run.exitcode == 0, (folder / "console.log").read_text()[-2000:]
    assert f"iter_{stopped_at}.pth at iteration {stopped_at}" in (stopped_dir / "console.log").read_text()

    expected = read_losses(reference_dir / "losses.txt")
    assert [iteration for iteration, _ in expected] == list(range(1, 9))
    assert read_losses(stopped_dir / "losses.txt") == expected  # nothing redone, nothing skipped
    resumed, uninterrupted = checkpoint(stopped_dir, 8), checkpoint(reference_dir, 8)
    for part in ("task", "optim", "rng"):
        assert_same_state(resumed[part], uninterrupted[part], part)
