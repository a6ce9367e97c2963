"""Plain reference scripts of the papers' methods, trained on a family's real train photos: what a
researcher writes from the papers and their official code, not a mirror of this project's configs
(benchmarks/plain/synthesis.py mirrors the configs, LabelMix, mode seeking and EMA included).

- `oasis` (OASIS, boschresearch/OASIS@aeb875f): SPADE generator with 64 channels of 3D noise drawn
  fresh for every forward pass; a segmenter D with classes + 1 outputs; class-balanced CE on reals
  (models/losses.py: weights pixels / (classes present x class pixels)), plain CE to "fake" on
  fakes; G step, then D step (train.py); Adam (0, 0.999), G 1e-4, D 4e-4 (config.py).
  `labelmix`: LabelMix with weight 10 (config.py lambda_labelmix), one coin per class over the
  batch (models.generate_labelmix). `ema`: the weights' moving average with decay 0.999
  (config.py, Cityscapes' EMA_decay), BatchNorm statistics then re-run over 50 train batches
  (utils.update_EMA). No mode seeking (not in OASIS).
- `spade` (SPADE, Park et al. 2019; NVlabs/SPADE): the same generator without noise (SPADE without
  its VAE draws one image per map), a two-scale PatchGAN with instance norm on [one-hot, image],
  hinge loss averaged over the scales, feature matching 10 / scales x the L1 of every
  intermediate feature; Adam (0, 0.9), G 1e-4, D 4e-4 (TTUR); G step, then D step. No VGG loss
  (no pretrained weights on this machine).
Both at the configs' network sizes (G width 32, SPADE hidden 32, 3 upsamplings; D as the
configs'): the budget is the configs', the method the paper's. `bf16`: forward passes under
bfloat16 autocast, losses in float32.
"""

import copy
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks/plain"))
from networks import MultiScalePatchDiscriminator, SegUNet, SPADEGenerator, gan_init  # noqa: E402

VARIANTS = {  # name -> (kind, labelmix weight, EMA decay or None)
    "oasis_paper": ("oasis", 10.0, 0.999),
    "oasis_bare": ("oasis", 0.0, None),
    "spade_paper": ("spade", 0.0, None),
}
OPTIMIZERS = {"oasis": (1e-4, 4e-4, (0.0, 0.999)), "spade": (1e-4, 4e-4, (0.0, 0.9))}
NOISE = {"oasis": 64, "spade": 0}
EMA_BN_BATCHES = 50


def build(variant: str, classes: int, seed: int) -> dict:
    kind, _, decay = VARIANTS[variant]
    torch.manual_seed(seed)
    G = SPADEGenerator(classes=classes, noise_dim=NOISE[kind], width=32, ups=3, hidden=32)
    if kind == "oasis":
        D = SegUNet(in_ch=3, classes=classes + 1, width=16, levels=3, batch_norm=False)
    else:
        D = gan_init(MultiScalePatchDiscriminator(in_ch=classes + 3, width=32, layers=3, scales=2))
    lr_g, lr_d, betas = OPTIMIZERS[kind]
    return {"G": G, "D": D, "G_ema": copy.deepcopy(G).requires_grad_(False) if decay else None,
            "opt_g": torch.optim.Adam(G.parameters(), lr=lr_g, betas=betas),
            "opt_d": torch.optim.Adam(D.parameters(), lr=lr_d, betas=betas), "iteration": 0, "classes": classes}


def one_hot(masks: torch.Tensor, classes: int) -> torch.Tensor:
    return torch.zeros(masks.shape[0], classes, *masks.shape[1:]).scatter_(1, masks[:, None], 1.0)


def noise(G, count: int) -> torch.Tensor:
    return torch.randn(count, G.noise_dim)


def balanced_ce(logits, masks, seg):
    occurrence = seg.sum(dim=(0, 2, 3))
    weights = (masks.numel() / ((occurrence > 0).sum() * occurrence))[masks]  # absent classes are never indexed
    return (F.cross_entropy(logits.float(), masks, reduction="none") * weights).mean()


def oasis_losses(D, real, fake, masks, seg, labelmix):
    """(D's loss, given fake detached) for OASIS."""
    real_out, fake_out = D(real), D(fake)
    loss = balanced_ce(real_out, masks, seg) + F.cross_entropy(fake_out.float(), torch.full_like(masks, seg.shape[1]))
    if labelmix:
        coins = torch.randint(0, 2, (seg.shape[1],)).float()  # one per class, shared by the batch
        mix = coins[masks][:, None]
        mixed_out = D(mix * real + (1 - mix) * fake)
        loss = loss + labelmix * F.mse_loss(mixed_out.float(), mix * real_out.float() + (1 - mix) * fake_out.float())
    return loss


def hinge_mean(outputs, term):
    return sum(term(o.float()) for o in outputs) / len(outputs)


def spade_g_loss(D, real, fake, seg):
    fake_out, fake_feats = D(torch.cat([seg, fake], 1))
    with torch.no_grad():
        _, real_feats = D(torch.cat([seg, real], 1))
    matching = sum(F.l1_loss(f.float(), r.float()) for scale_f, scale_r in zip(fake_feats, real_feats)
                   for f, r in zip(scale_f, scale_r)) * 10.0 / len(fake_feats)
    return hinge_mean(fake_out, lambda o: -o.mean()) + matching


def spade_d_loss(D, real, fake, seg):
    real_out, _ = D(torch.cat([seg, real], 1))
    fake_out, _ = D(torch.cat([seg, fake], 1))
    return hinge_mean(real_out, lambda o: F.relu(1 - o).mean()) + hinge_mean(fake_out, lambda o: F.relu(1 + o).mean())


def step(state: dict, variant: str, real: torch.Tensor, masks: torch.Tensor, bf16: bool) -> None:
    """One iteration: G, then D (as both official train loops), then the EMA."""
    kind, labelmix, decay = VARIANTS[variant]
    G, D, opt_g, opt_d = state["G"], state["D"], state["opt_g"], state["opt_d"]
    seg = one_hot(masks, state["classes"])

    def autocast():
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)

    D.requires_grad_(False)
    with autocast():
        fake = G(seg, noise(G, len(real)))
        loss_g = balanced_ce(D(fake), masks, seg) if kind == "oasis" else spade_g_loss(D, real, fake, seg)
    opt_g.zero_grad(set_to_none=True)
    loss_g.backward()
    opt_g.step()
    D.requires_grad_(True)
    with autocast():
        with torch.no_grad():
            fake = G(seg, noise(G, len(real)))  # OASIS draws anew for D's step (its G draws its own noise)
        loss_d = oasis_losses(D, real, fake, masks, seg, labelmix) if kind == "oasis" else spade_d_loss(D, real, fake, seg)
    opt_d.zero_grad(set_to_none=True)
    loss_d.backward()
    opt_d.step()
    if decay:
        with torch.no_grad():  # every float of the state dict, buffers too (OASIS's update_EMA)
            live = G.state_dict()
            for key, value in state["G_ema"].state_dict().items():
                if value.dtype.is_floating_point:
                    value.lerp_(live[key], 1 - decay)
    state["iteration"] += 1


@torch.no_grad()
def reestimate_ema_batchnorm(state: dict, masks: torch.Tensor, batch: int) -> None:
    """OASIS's: the EMA generator run in training mode over `EMA_BN_BATCHES` train batches."""
    G_ema = state["G_ema"]
    G_ema.train()
    shuffled = masks[torch.randperm(len(masks))]  # batches as a shuffling loader gives them
    for first in range(0, min(len(shuffled), EMA_BN_BATCHES * batch), batch):
        labels = shuffled[first:first + batch]
        G_ema(one_hot(labels, state["classes"]), noise(G_ema, len(labels)))
    G_ema.eval()


@torch.no_grad()
def draw(G, masks: torch.Tensor, classes: int, seed: int, batch: int = 50) -> torch.Tensor:
    """N x 3 x H x W uint8 images of `masks`, noise from `seed` (the same per map at any batch)."""
    G.eval()
    generator = torch.Generator().manual_seed(seed)
    z = torch.randn(len(masks), G.noise_dim, generator=generator)
    out = [G(one_hot(masks[i:i + batch], classes), z[i:i + batch])
           for i in range(0, len(masks), batch)]
    return ((torch.cat(out).float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
