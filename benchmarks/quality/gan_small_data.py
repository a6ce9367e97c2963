"""What DiffAugment and spectral normalisation change for a DCGAN trained on 300 images.

Each variant trains projects/dcgan/configs/dcgan_small_data.yaml (hinge loss, D without
batch norm) on the same 300 shapes images for the same number of iterations, once per seed,
with DiffAugment on/off (adaptive p as the config ships it, and always on: p=1) and spectral
norm on/off; plus the plain DCGAN config
(dcgan_shapes.yaml: vanilla loss, batch-norm D) on the same 300 images as a baseline. The
EMA generator of each run draws `--samples` images, scored against as many held-out real
images (other seed, never trained on) with:

- SWD (framework/metrics/generative.py: Laplacian-pyramid 7x7 patches, x 1e3, mean over levels);
- FID and KID (torchmetrics) in the feature space of a small CNN this script trains first on
  2000 other real shapes images to regress each image's fraction of circle / rectangle /
  triangle / background pixels from the dataset's masks (64-d penultimate features). No
  download, and the features see what the data is about (shape kinds and sizes); values are
  comparable only within this benchmark (not with Inception FIDs).

Lower is better for all three; the first line scores as many other real images the same way (the
floor a perfect generator would reach). Results: one line per run and a mean +- std per variant,
also written to <out>/results.json.

    python benchmarks/quality/gan_small_data.py [--iters 3000] [--seeds 0 1 2] [--samples 1000] [--out /tmp/gan_small_data]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import torch
from torch import nn

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import framework  # noqa: E402, F401
import projects.dcgan  # noqa: E402, F401
from framework.checkpoint.run_folder import checkpoint_folder, iteration_name  # noqa: E402
from framework.data.shapes import SyntheticShapes  # noqa: E402
from framework.metrics.generative import SWD  # noqa: E402
from framework.registry import MODELS  # noqa: E402

SMALL = REPO / "projects/dcgan/configs/dcgan_small_data.yaml"
PLAIN = REPO / "projects/dcgan/configs/dcgan_shapes.yaml"
VARIANTS = {  # name: (config, overrides)
    "dcgan (vanilla, BN D)": (PLAIN, []),
    "hinge": (SMALL, ["task.d_augment=null", "task.discriminator.spectral_norm=false"]),
    "hinge + SN": (SMALL, ["task.d_augment=null"]),
    "hinge + DiffAugment": (SMALL, ["task.discriminator.spectral_norm=false"]),
    "hinge + SN + DiffAugment": (SMALL, []),  # adaptive p, as the config ships
    "hinge + SN + DiffAugment p=1": (SMALL, ["task.d_augment.adaptive=false", "+task.d_augment.p=1.0"]),
}


def real_images(count: int, seed: int, with_masks: bool = False):
    shapes = SyntheticShapes(num_samples=count, size=32, seed=seed, max_shapes=3)
    images, fractions = [], []
    for index in range(count):
        image, mask, _ = shapes.load_sample(index)
        images.append(torch.from_numpy(image).permute(2, 0, 1))
        fractions.append(torch.bincount(torch.from_numpy(mask).flatten().long(), minlength=4)[:4].float() / mask.size)
    images = torch.stack(images).float() / 255
    return (images, torch.stack(fractions)) if with_masks else images


class ShapeFeatures(nn.Module):
    """A small CNN; `forward` gives 64-d features, `head` the 4 class-pixel fractions."""

    num_features = 64

    def __init__(self):
        super().__init__()
        def block(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.body = nn.Sequential(block(3, 32), block(32, 64), block(64, 64), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                  nn.Linear(64, 64), nn.ReLU())
        self.head = nn.Linear(64, 4)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.body(images.float())


def train_feature_extractor(steps: int = 1500) -> ShapeFeatures:
    torch.manual_seed(0)
    images, fractions = real_images(2000, seed=777, with_masks=True)
    network = ShapeFeatures()
    optimizer = torch.optim.Adam(network.parameters(), lr=2e-3)
    for _ in range(steps):
        index = torch.randint(0, len(images), (64,))
        # x 10: the fractions are small numbers; MSE on them directly gives the net little to learn from
        loss = nn.functional.mse_loss(network.head(network(images[index])), 10 * fractions[index])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    held_out, truth = real_images(500, seed=778, with_masks=True)
    with torch.no_grad():
        error = (network.head(network(held_out)) / 10 - truth).abs().mean()
    print(f"feature extractor: mean absolute error of the class fractions on 500 held-out images {error:.4f} "
          f"(predicting the mean: {(truth - truth.mean(0)).abs().mean():.4f})", flush=True)
    return network.eval().requires_grad_(False)


def train(config: Path, overrides: list[str], seed: int, iters: int, work_dir: Path) -> Path:
    common = [f"seed={seed}", f"train.max_iters={iters}", f"train.ckpt_interval={iters}", "train.val_interval=0",
              "train.val_at_start=false", "train.progress_bar=false", f"train.log_interval={max(iters // 5, 1)}",
              "data.train.dataset.num_samples=300", "data.train.num_workers=0", "device=cpu"]
    command = [sys.executable, str(REPO / "tools/train.py"), "--config", str(config), "--work-dir", str(work_dir),
               "--overwrite", *common, *overrides]
    subprocess.run(command, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    return checkpoint_folder(work_dir) / iteration_name(iters)


@torch.no_grad()
def samples(checkpoint: Path, count: int) -> torch.Tensor:
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)["task"]
    generator = MODELS.build({"type": "DCGANGenerator", "latent_dim": 64, "base_channels": 32, "image_size": 32})
    generator.load_state_dict({k.split(".", 1)[1]: v for k, v in state.items() if k.startswith("generator_ema.")})
    noise = torch.randn(count, 64, 1, 1, generator=torch.Generator().manual_seed(12345))
    return ((generator.eval()(noise) + 1) / 2).clamp(0, 1)


def scores(fake: torch.Tensor, real: torch.Tensor, features: ShapeFeatures) -> dict[str, float]:
    from torchmetrics.image.fid import FrechetInceptionDistance
    from torchmetrics.image.kid import KernelInceptionDistance

    swd = SWD()
    for start in range(0, len(real), 250):
        swd.update({"fake": fake[start:start + 250], "real": real[start:start + 250]})
    fid = FrechetInceptionDistance(feature=features, normalize=True)
    kid = KernelInceptionDistance(feature=features, normalize=True, subset_size=min(500, len(real)))
    for metric in (fid, kid):
        metric.update(real, real=True)
        metric.update(fake, real=False)
    return {"SWD": swd.compute()["SWD"], "FID": float(fid.compute()), "KID": float(kid.compute()[0])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=3000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS),
                        help="none: only the real-images floor")
    parser.add_argument("--feature-steps", type=int, default=1500, help="training steps of the feature extractor")
    parser.add_argument("--out", type=Path, default=Path("/tmp/gan_small_data"))
    args = parser.parse_args()
    features = train_feature_extractor(args.feature_steps)
    real = real_images(args.samples, seed=4242)
    # The floor: as many other real images (never trained on), scored as a generator's samples are.
    floor = scores(real_images(args.samples, seed=4243), real, features)
    print("real images (another seed)    " + "  ".join(f"{k} {v:.4f}" for k, v in floor.items()), flush=True)
    results = {}
    for name in args.variants:
        config, overrides = VARIANTS[name]
        for seed in args.seeds:
            work_dir = args.out / name.replace(" ", "_").replace("+", "").replace("(", "").replace(")", "").replace(",", "")
            checkpoint = train(config, overrides, seed, args.iters, work_dir / f"seed{seed}")
            values = scores(samples(checkpoint, args.samples), real, features)
            results.setdefault(name, []).append(values)
            print(f"{name:28s} seed {seed}: " + "  ".join(f"{k} {v:.4f}" for k, v in values.items()), flush=True)
    print(f"\n{args.iters} iterations, 300 training images, {args.samples} samples vs {args.samples} held-out reals")
    for name, runs in results.items():
        summary = []
        for key in ("SWD", "FID", "KID"):
            values = [run[key] for run in runs]
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            summary.append(f"{key} {statistics.mean(values):.4f} +- {spread:.4f}")
        print(f"{name:28s} " + "  ".join(summary))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"iters": args.iters, "seeds": args.seeds, "real_floor": floor,
                                                       "results": results}, indent=1))


if __name__ == "__main__":
    main()
