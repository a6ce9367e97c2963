"""GANTask's EMA generator with BatchNorm (DCGAN's, pix2pix's with a batch-norm U-Net): its
statistics re-estimated on the last `ema_bn_batches` batches' noise or inputs before it is
evaluated or saved (framework/tasks/ema_batchnorm.py; the synthesis task's:
tests/test_synthesis_fidelity.py)."""

import copy

import pytest
import torch
from torch import nn

import framework  # noqa: F401  (fills the registries)
from framework.optim.optimizers import build_optimizers
from framework.tasks.gan import GANTask
from support import named

LATENT = 4


def generator(conditional: bool) -> nn.Module:
    first = nn.Conv2d(3, 8, 3, 1, 1) if conditional else nn.ConvTranspose2d(LATENT, 8, 8, 1, 0)
    return nn.Sequential(first, nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 3, 3, 1, 1), nn.Tanh())


def discriminator(conditional: bool) -> nn.Module:
    return nn.Sequential(nn.Conv2d(6 if conditional else 3, 4, 4, 2, 1), nn.LeakyReLU(0.2), nn.Conv2d(4, 1, 4, 2, 1))


def batch(seed: int, conditional: bool) -> dict:
    draw = torch.Generator().manual_seed(seed)
    images = [torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8, generator=draw) for _ in range(2)]
    if conditional:
        return {"input": images[0], "target": images[1], "index": torch.tensor([0, 1])}
    return {"image": images[0], "index": torch.tensor([0, 1])}


def task_and_optimizers(conditional: bool):
    torch.manual_seed(0)
    task = GANTask(generator(conditional), discriminator(conditional), ema_decay=0.5, ema_bn_batches=2,
                   latent_dim=None if conditional else LATENT, num_fixed_samples=2)
    optim = build_optimizers({"optimizers": {"generator": {"type": "SGD", "lr": 0.05, "params": "generator"},
                                             "discriminator": {"type": "SGD", "lr": 0.05, "params": "discriminator"}}},
                             task, max_iters=10)
    return task, optim


def statistics(network):
    return {name: buffer.clone() for name, buffer in network.named_buffers() if "running" in name}


@pytest.mark.parametrize("conditional", [False, True], ids=["noise", "inputs"])
def test_the_ema_generators_statistics_are_reestimated_on_the_last_batches(conditional):
    task, optim = task_and_optimizers(conditional)
    for seed in (1, 2, 3):
        task.train_iteration([batch(seed, conditional)], optim)
    network = copy.deepcopy(task.ema["generator"]).eval()  # by hand: reset, momentum None, BatchNorm in train mode
    draw = torch.Generator().manual_seed(task.ema.updates.value)
    for module in network.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.reset_running_stats()
            module.momentum = None
            module.train()
    with torch.no_grad():
        for seed in (2, 3):
            given = batch(seed, conditional)
            network(given["input"].float() / 127.5 - 1 if conditional else torch.randn(2, LATENT, 1, 1, generator=draw))
    expected, live, rng = statistics(network), statistics(task.generator), torch.get_rng_state()
    modes = [module.training for module in task.ema["generator"].modules()]
    reestimated = statistics(task.generator_for())
    for name, value in expected.items():
        torch.testing.assert_close(reestimated[name], value, rtol=1e-5, atol=1e-6, msg=named(name))
        assert not torch.allclose(value, live[name]), name
    assert torch.equal(torch.get_rng_state(), rng)  # the training random stream untouched
    assert [module.training for module in task.ema["generator"].modules()] == modes
    task.train_iteration([batch(4, conditional)], optim)  # the update copies the live statistics again
    torch.testing.assert_close(statistics(task.ema["generator"]), statistics(task.generator))
    saved = task.state_dict()  # a checkpoint: re-estimated first
    assert not torch.allclose(saved["ema.generator.1.running_mean"], task.generator.state_dict()["1.running_mean"])
    assert len(task.rank_state_dict()["ema_bn"]["labels"]) == 2


def test_resume_is_exact_with_the_remembered_batches():
    """Saved after 2 iterations and resumed for a third: the EMA's statistics, re-estimated on
    batches 2 and 3, equal an uninterrupted run's."""
    straight, optim = task_and_optimizers(False)
    torch.manual_seed(3)
    for seed in (1, 2, 3):
        straight.train_iteration([batch(seed, False)], optim)
    first, optim = task_and_optimizers(False)
    torch.manual_seed(3)
    for seed in (1, 2):
        first.train_iteration([batch(seed, False)], optim)
    saved, rank_state, rng = first.state_dict(), copy.deepcopy(first.rank_state_dict()), torch.get_rng_state()
    resumed, optim = task_and_optimizers(False)  # SGD without momentum: no optimizer state to carry
    resumed.load_state_dict(saved)
    resumed.load_rank_state_dict(rank_state)
    torch.set_rng_state(rng)
    resumed.train_iteration([batch(3, False)], optim)  # its re-estimation reads batch 2 from the checkpoint
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name


def test_cyclegan_refuses_an_ema_of_generators_with_batchnorm_in_one_line():
    """CycleGANTask does not re-estimate its EMAs' statistics: an EMA of BatchNorm generators is refused."""
    from framework.errors import ConfigError
    from framework.registry import TASKS

    def node(norm_layer):
        nets = {f"generator_{d}": nn.Sequential(nn.Conv2d(3, 4, 3, 1, 1), norm_layer(4), nn.Conv2d(4, 3, 3, 1, 1))
                for d in ("ab", "ba")}
        nets.update({f"discriminator_{d}": discriminator(False) for d in ("a", "b")})
        return {"type": "CycleGANTask", "ema_decay": 0.9, **nets}
    with pytest.raises(ConfigError, match=r"task \(CycleGANTask\): ema_decay: the generators have BatchNorm, whose "
                                          r"running statistics the EMA copies from the live generators"):
        TASKS.build(node(nn.BatchNorm2d), path="task")
    TASKS.build(node(nn.InstanceNorm2d), path="task")  # CycleGAN's instance norm keeps no running statistics
