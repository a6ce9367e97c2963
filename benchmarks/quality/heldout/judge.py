"""The independent judge of one family: benchmarks/plain/segmentation.py's script (its U-Net of
benchmarks/plain/networks.py, its flips, AdamW and cross-entropy loop), not the framework's
SegmentationTask, trained on the family's real train photos; it scores images by mIoU against
the label maps they show.
"""

import sys
from pathlib import Path

import cv2
import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks/plain"))  # the plain scripts import each other by name
from networks import SegUNet  # noqa: E402
from segmentation import training_steps  # noqa: E402

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255  # the plain script's normalisation
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255


def read_split(root, split: str) -> tuple[list[str], torch.Tensor, torch.Tensor]:
    """(names, N x 3 x H x W uint8 photos, N x H x W int64 class maps) of a VOC-layout split."""
    root = Path(root)
    names = (root / "ImageSets" / "Segmentation" / f"{split}.txt").read_text().split()
    images = [cv2.cvtColor(cv2.imread(str(root / "JPEGImages" / f"{n}.jpg")), cv2.COLOR_BGR2RGB) for n in names]
    masks = [np.asarray(Image.open(root / "SegmentationClass" / f"{n}.png")) for n in names]
    return (names, torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).contiguous(),
            torch.from_numpy(np.stack(masks)).long())


def make_judge(classes: int) -> torch.nn.Module:
    return SegUNet(in_ch=3, classes=classes, width=16, levels=3)  # 16..128 channels, as the judge


def train_judge(root, classes: int, iters: int, seed: int = 0, batch: int = 16, log=None) -> torch.nn.Module:
    """The judge trained `iters` iterations on the real train photos (the plain script's loop and
    settings); `log(line)` hears the loss every 100 iterations."""
    torch.manual_seed(seed)
    _, images, masks = read_split(root, "train")
    model = make_judge(classes)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    steps = training_steps(images, masks, model, optimizer, min(batch, len(images)), torch.device("cpu"))
    for iteration in range(1, iters + 1):
        loss = next(steps)
        if log and iteration % 100 == 0:
            log(f"  judge iteration {iteration}/{iters}, loss {loss.item():.3f}")
    return model.eval()


@torch.no_grad()
def predict(model: torch.nn.Module, images: torch.Tensor, batch: int = 50) -> torch.Tensor:
    """N x H x W class ids of N x 3 x H x W uint8 images."""
    model.eval()
    return torch.cat([model((images[i:i + batch].float() - MEAN) / STD).argmax(1) for i in range(0, len(images), batch)])


def miou(predicted: torch.Tensor, truth: torch.Tensor, classes: int) -> float:
    """Mean over the classes present in the truth or the prediction of intersection / union,
    counted over all pixels of the set (as mmsegmentation's mIoU: one confusion matrix)."""
    confusion = torch.bincount(truth.flatten() * classes + predicted.flatten(), minlength=classes * classes)
    confusion = confusion.view(classes, classes).double()
    intersection = confusion.diag()
    union = confusion.sum(0) + confusion.sum(1) - intersection
    return float((intersection[union > 0] / union[union > 0]).mean())


def score(model: torch.nn.Module, images: torch.Tensor, truth: torch.Tensor, classes: int) -> float:
    return miou(predict(model, images), truth, classes)
