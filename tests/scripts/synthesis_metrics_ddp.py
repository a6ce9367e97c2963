"""Run as 2 ranks of a gloo group (tests/support.py's run_forked_ranks): the synthesis metrics
(SegmenterScore, Diversity, KID) over 5 label maps split unevenly between the ranks (rank 0:
samples 0-2 in batches of 2 and 1, rank 1: samples 3-4 in one batch), synced as evaluation
syncs them. argv: out folder, segmenter config, segmenter checkpoint, KID weights file. Writes
<out>/rank<r>.json with what compute() returned on that rank."""

import json
import sys

import torch
import torch.distributed as dist

import framework  # noqa: F401  (fills the registries)
from framework.dist.process_group import all_reduce_sum_
from framework.registry import METRICS

BATCHES = {0: [slice(0, 2), slice(2, 3)], 1: [slice(3, 5)]}


def outputs() -> dict:
    """5 label maps of SyntheticTextures with their images, and two perturbed draws."""
    from framework.data import SyntheticTextures

    dataset = SyntheticTextures(num_samples=5, size=32, seed=7)
    real = torch.stack([dataset[i]["image"] for i in range(5)]).float() / 255
    labels = torch.stack([dataset[i]["mask"] for i in range(5)])
    generator = torch.Generator().manual_seed(0)
    fake = (real + 0.3 * torch.rand(real.shape, generator=generator)).clamp(0, 1)
    fake_alt = (real + 0.3 * torch.rand(real.shape, generator=generator)).clamp(0, 1)
    return {"real": real, "fake": fake, "fake_alt": fake_alt, "labels": labels}


def metric_nodes(config: str, checkpoint: str, kid_weights: str) -> list[dict]:
    return [{"type": "SegmenterScore", "config": config, "checkpoint": checkpoint, "num_classes": 7},
            {"type": "Diversity"},
            {"type": "KID", "weights_path": kid_weights, "feature": 64, "subsets": 3, "subset_size": 4}]


def main(out: str, config: str, checkpoint: str, kid_weights: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    data = outputs()
    results = {}
    for node in metric_nodes(config, checkpoint, kid_weights):
        metric = METRICS.build(node)
        metric.reset()
        for batch in BATCHES[rank]:
            metric.update({key: value[batch] for key, value in data.items()})
        metric.sync(all_reduce_sum_)
        results.update(metric.compute())
    with open(f"{out}/rank{rank}.json", "w") as f:
        json.dump(results, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:5])
