"""The adversary's lazy R1 on its own (framework/tasks/adversary.py): which D steps carry the
penalty, its scaling by the interval, that D's update differentiates it, and that the schedule
resumes from the checkpointed D-step count. tests/test_cyclegan.py checks the same through
CycleGAN's hand-written loop; here a linear discriminator gives the penalty by hand."""

import torch
from torch import nn

from framework.tasks.adversary import Adversary

R1_WEIGHT, INTERVAL, W = 0.25, 3, 0.5


def linear_discriminator() -> nn.Conv2d:
    """D(x) = w . x + b over the whole 3 x 4 x 4 image, w = 0.5 everywhere: its gradient with respect
    to x is w for every image, so ||grad_x D||^2 = 48 x 0.25 = 12."""
    discriminator = nn.Conv2d(3, 1, kernel_size=4)
    with torch.no_grad():
        discriminator.weight.fill_(W)
        discriminator.bias.fill_(0.1)
    return discriminator


# gamma / 2 x interval x ||grad||^2 = 0.25 / 2 x 3 x 12
PENALTY = R1_WEIGHT / 2 * INTERVAL * 48 * W**2
# and its gradient with respect to each weight: gamma x interval x w = 0.25 x 3 x 0.5
PENALTY_GRAD = R1_WEIGHT * INTERVAL * W


def d_step(adversary, discriminator, real, fake):
    """One D step: its number, the logs, the gradient of D's loss with respect to D's weight."""
    number = adversary.start_d_step()
    discriminator.zero_grad(set_to_none=True)
    loss, logs = adversary.d_loss(discriminator, real, fake, details=False)
    loss.backward()
    return number, logs, discriminator.weight.grad.clone()


def test_r1_falls_on_every_interval_th_d_step_scaled_by_the_interval_and_resumes_with_the_count():
    torch.manual_seed(0)
    real, fake = torch.rand(2, 3, 4, 4), torch.rand(2, 3, 4, 4)
    discriminator = linear_discriminator()
    adversary = Adversary("vanilla", r1_weight=R1_WEIGHT, r1_interval=INTERVAL)
    plain = Adversary("vanilla")  # the same D loss without R1: what a step without the penalty computes
    assert adversary.uses_double_backward and not plain.uses_double_backward
    carried = []
    for expected_number in range(1, 8):
        number, logs, grad = d_step(adversary, discriminator, real, fake)
        _, plain_logs, plain_grad = d_step(plain, discriminator, real, fake)
        assert number == expected_number
        if "loss_d_r1" in logs:
            carried.append(number)
            torch.testing.assert_close(logs["loss_d_r1"], torch.tensor(PENALTY))
            torch.testing.assert_close(logs["loss_d"], plain_logs["loss_d"] + PENALTY)
            torch.testing.assert_close(grad - plain_grad, torch.full_like(grad, PENALTY_GRAD))  # differentiated
        else:
            torch.testing.assert_close(logs["loss_d"], plain_logs["loss_d"])
            torch.testing.assert_close(grad, plain_grad)
    assert carried == [3, 6]

    resumed = Adversary("vanilla", r1_weight=R1_WEIGHT, r1_interval=INTERVAL)
    resumed.load_state_dict(adversary.state_dict())  # after D step 7: steps 8 and 9 come next
    assert resumed.d_steps.value == 7
    carries = [("loss_d_r1" in d_step(resumed, discriminator, real, fake)[1]) for _ in range(2)]
    assert carries == [False, True]


def test_r1_every_step_at_interval_one_and_never_at_weight_zero():
    real, fake = torch.rand(2, 3, 4, 4), torch.rand(2, 3, 4, 4)
    discriminator = linear_discriminator()
    every = Adversary("hinge", r1_weight=2.0)  # interval 1: every step, unscaled (2 / 2 x 12)
    never = Adversary("hinge")
    for _ in range(3):
        torch.testing.assert_close(d_step(every, discriminator, real, fake)[1]["loss_d_r1"], torch.tensor(12.0))
        assert "loss_d_r1" not in d_step(never, discriminator, real, fake)[1]
