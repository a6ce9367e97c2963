"""What one training iteration costs the framework beyond the computation: its Trainer (task,
optimizers, hooks, logging every 50 iterations) against a hand-written loop, both on
near-zero-compute networks (benchmarks/helpers/tiny_nets.py) and batches already in memory. Both use
fused optimizers, the framework's default.

    python benchmarks/release/fixed_cost.py [--steps 500] [--repeats 5]

Blocks of `steps` iterations alternate between the two, in one process, one thread; prints one
JSON line: per case the median milliseconds per iteration of each and the difference.
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.release.in_process import build_quiet_trainer  # noqa: E402

BATCH, SIZE, LOG_INTERVAL = 4, 16, 50
COMMON = ["device=cpu", "train.val_interval=0",
          "train.ckpt_interval=0", f"train.log_interval={LOG_INTERVAL}", "train.progress_bar=false",
          f"data.train.batch_size={BATCH}", "data.train.num_workers=0", "data.val=null", "metrics=[]",
          "channels_last=false", "amp.enabled=false"]  # float32, as the hand-written loop


class MemoryBatches:
    """Stands in for the Trainer's TrainData: the same batch objects, already in memory."""

    def __init__(self, batches):
        self.batches, self.epoch, self.batches_in_epoch, self.position = batches, 0, 0, 0

    def __iter__(self):
        return self

    def __next__(self):
        self.position += 1
        return self.batches[self.position % len(self.batches)]


def framework_trainer(config, overrides, batches, work_dir):
    trainer = build_quiet_trainer(REPO / config, [*COMMON, *overrides], work_dir)
    trainer.data = MemoryBatches(batches)
    return trainer


def run_framework(trainer, steps):
    trainer.max_iters += steps
    start = time.perf_counter()
    trainer.fit()
    return (time.perf_counter() - start) / steps


def segmentation_case(work_dir):
    overrides = ["custom_imports=[benchmarks.helpers.tiny_nets]", "task.model={type: TinySegmenter, num_classes: 4}",
                 "optim.scheduler=null",
                 f"data.train.dataset.size={SIZE}", "data.train.dataset.num_samples=16"]
    batches = [{"image": torch.randint(0, 256, (BATCH, 3, SIZE, SIZE), dtype=torch.uint8),
                "mask": torch.randint(0, 4, (BATCH, SIZE, SIZE))} for _ in range(8)]
    trainer = framework_trainer("configs/segmentation/unet_shapes.yaml", overrides, batches, work_dir)
    model = torch.nn.Conv2d(3, 4, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4, fused=True)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255

    def handwritten(steps):
        start = time.perf_counter()
        for it in range(1, steps + 1):
            batch = batches[it % len(batches)]
            loss = F.cross_entropy(model((batch["image"].float() - mean) / std), batch["mask"], ignore_index=255)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if it % LOG_INTERVAL == 0:
                loss.item()
        return (time.perf_counter() - start) / steps

    return handwritten, lambda steps: run_framework(trainer, steps)


def gan_case(work_dir):
    overrides = ["custom_imports=[projects.pix2pix, benchmarks.helpers.tiny_nets]", "task.generator={type: TinyGenerator}", "task.discriminator={type: TinyDiscriminator}",
                 "optimizers.generator.scheduler=null", "optimizers.discriminator.scheduler=null",
                 f"data.train.dataset.size={SIZE}", "data.train.dataset.num_samples=16"]
    batches = [{"input": torch.randint(0, 256, (BATCH, 3, SIZE, SIZE), dtype=torch.uint8),
                "target": torch.randint(0, 256, (BATCH, 3, SIZE, SIZE), dtype=torch.uint8)} for _ in range(8)]
    trainer = framework_trainer("projects/pix2pix/configs/pix2pix_shapes.yaml", overrides, batches, work_dir)
    G, D = torch.nn.Sequential(torch.nn.Conv2d(3, 3, 1), torch.nn.Tanh()), torch.nn.Conv2d(6, 1, 1)
    opt_g = torch.optim.Adam(G.parameters(), lr=5e-4, betas=(0.5, 0.999), fused=True)
    opt_d = torch.optim.Adam(D.parameters(), lr=5e-4, betas=(0.5, 0.999), fused=True)
    bce = F.binary_cross_entropy_with_logits

    def handwritten(steps):
        start = time.perf_counter()
        for it in range(1, steps + 1):
            batch = batches[it % len(batches)]
            a, b = batch["input"].float() / 127.5 - 1, batch["target"].float() / 127.5 - 1
            fake = G(a)
            real_logits, fake_logits = D(torch.cat([a, b], 1)), D(torch.cat([a, fake.detach()], 1))
            loss_d = 0.5 * (bce(real_logits, torch.ones_like(real_logits)) + bce(fake_logits, torch.zeros_like(fake_logits)))
            opt_d.zero_grad(set_to_none=True)
            loss_d.backward()
            opt_d.step()
            D.requires_grad_(False)
            logits = D(torch.cat([a, fake], 1))
            loss_g = bce(logits, torch.ones_like(logits)) + 100 * F.l1_loss(fake, b)
            opt_g.zero_grad(set_to_none=True)
            loss_g.backward()
            opt_g.step()
            D.requires_grad_(True)
            if it % LOG_INTERVAL == 0:
                loss_d.item(), loss_g.item()
        return (time.perf_counter() - start) / steps

    return handwritten, lambda steps: run_framework(trainer, steps)


def measure(case, steps, repeats, work_dir):
    handwritten, framework = case(work_dir)
    handwritten(steps // 5), framework(steps // 5)  # warm-up
    plain, ours = [], []
    for _ in range(repeats):
        plain.append(handwritten(steps))
        ours.append(framework(steps))
    plain_ms, ours_ms = statistics.median(plain) * 1e3, statistics.median(ours) * 1e3
    return {"handwritten_ms": plain_ms, "framework_ms": ours_ms, "overhead_ms": ours_ms - plain_ms}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        results = {name: measure(case, args.steps, args.repeats, str(Path(tmp) / name))
                   for name, case in (("segmentation", segmentation_case), ("gan", gan_case))}
    print(json.dumps(results))


if __name__ == "__main__":
    main()
