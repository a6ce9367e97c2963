"""Run as 2 ranks of a gloo group (tests/support.py's run_forked_ranks): SWD and MS-SSIM over
images split unevenly between the ranks (rank 0: images 0-2 in batches of 2 and 1, rank 1:
images 3-4 in one batch), synced as evaluation syncs them. Writes <out>/rank<r>.json with what
compute() returned on that rank."""

import json
import sys

import torch
import torch.distributed as dist

import framework  # noqa: F401  (fills the registries)
from framework.dist.process_group import all_reduce_sum_
from framework.registry import METRICS

SWD = {"type": "SWD", "descriptors_per_image": 8, "directions": 16, "repeats": 2, "seed": 4}
MS_SSIM = {"type": "MS-SSIM", "betas": [0.3, 0.4, 0.3]}
BATCHES = {0: [slice(0, 2), slice(2, 3)], 1: [slice(3, 5)]}


def images():
    generator = torch.Generator().manual_seed(0)
    real = torch.rand(5, 3, 48, 48, generator=generator)
    fake = (real.flip(0) * 0.7 + 0.3 * torch.rand(5, 3, 48, 48, generator=generator)).clamp(0, 1)
    return real, fake


def main(out: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    real, fake = images()
    results = {}
    for node in (SWD, MS_SSIM):
        metric = METRICS.build(node)
        metric.reset()
        for batch in BATCHES[rank]:
            metric.update({"real": real[batch], "fake": fake[batch]})
        metric.sync(all_reduce_sum_)
        results.update(metric.compute())
    with open(f"{out}/rank{rank}.json", "w") as f:
        json.dump(results, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
