"""Run as 2 ranks of a gloo group (tests/support.py's run_forked_ranks): framework.dist's helpers
that other packages call instead of torch.distributed. Rank 0 holds 3 rows, rank 1 one row (unequal
counts); each rank starts the broadcast with its own values. Writes <out>/rank<r>.json."""

import json
import sys

import torch
import torch.distributed as dist
from torch import nn

from framework.dist import NetworkDDP, all_gather_rows, broadcast_from_main_, get_rank, get_world_size, unwrap


def main(out: str) -> None:
    dist.init_process_group("gloo")
    rank = get_rank()
    rows = torch.full((3 if rank == 0 else 1, 2), float(rank + 1))
    rows[:, 1] = torch.arange(rows.shape[0])
    gathered = all_gather_rows(rows)
    counts = torch.full((2, 3), float(10 * (rank + 1)), dtype=torch.float64)
    broadcast_from_main_(counts)
    network = nn.Linear(2, 2)
    wrapper = NetworkDDP(network)
    result = {"world_size": get_world_size(), "gathered": gathered.tolist(), "broadcast": counts.tolist(),
              "unwrap_is_network": unwrap(wrapper) is network, "unwrap_of_plain": unwrap(network) is network}
    with open(f"{out}/rank{rank}.json", "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
