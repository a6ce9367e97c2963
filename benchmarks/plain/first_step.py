"""A researcher's own script up to the end of its first training step, the start-up baseline of
benchmarks/release/speed.py: the Quickstart's UNet (channels_last), a fused AdamW, one batch of 8 random
64x64 images and masks, one step. Its time after `import torch` is what any PyTorch script pays
before training starts (torch imports torch._dynamo when the first optimizer is built).

    python benchmarks/plain/first_step.py
"""

import torch
import torch.nn.functional as F

from networks import SegUNet


def main():
    torch.manual_seed(0)
    model = SegUNet(in_ch=3, classes=4, width=16, levels=3)
    model = model.to(memory_format=torch.channels_last)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4, fused=True)
    images = torch.rand(8, 3, 64, 64).contiguous(memory_format=torch.channels_last)
    masks = torch.randint(0, 4, (8, 64, 64))
    loss = F.cross_entropy(model(images), masks)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
