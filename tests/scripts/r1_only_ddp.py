"""Run under torchrun (2 processes): a discriminator updated by a loss made ONLY of the R1
penalty (LazyR1.real_pass), each rank on half of a fixed batch, for 3 steps; rank 0 also
trains an unwrapped copy on the whole batch. Writes <out>/rank<r>.pt with the weights (and
rank 0 the reference's). Without the 0 x logits tie, the head's bias gets no gradient and
DDP fails at the second step."""

import sys

import torch
import torch.distributed as dist

from framework.dist import NetworkDDP
from framework.models.discriminators import MultiScaleDiscriminator
from framework.tasks.discriminator_step import LazyR1


def main(out: str) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    reference = MultiScaleDiscriminator(3, num_scales=2, base_channels=4, num_layers=2, norm="none")
    network = MultiScaleDiscriminator(3, num_scales=2, base_channels=4, num_layers=2, norm="none")
    network.load_state_dict(reference.state_dict())
    wrapped = NetworkDDP(network)
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.5)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.5)
    r1 = LazyR1(weight=1.0, interval=1)
    for step in range(3):
        batch = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(step))
        optimizer.zero_grad(set_to_none=True)
        _, term = r1.real_pass(wrapped, batch.chunk(world)[rank])
        term.backward()
        optimizer.step()
        reference_optimizer.zero_grad(set_to_none=True)
        _, term = r1.real_pass(reference, batch)
        term.backward()
        reference_optimizer.step()
    torch.save({"weights": network.state_dict(), "reference": reference.state_dict()}, f"{out}/rank{rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
