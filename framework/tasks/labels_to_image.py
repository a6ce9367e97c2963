"""The exported form of a semantic synthesis generator (SemanticSynthesisTask.deployable): class-id
label maps and noise in, images in [0, 1] out, one graph for tools/infer.py and export alike."""

from __future__ import annotations

import torch
from torch import nn

from framework.inference.export import example_inputs, traceable_pad
from framework.inference.generator import to_unit
from framework.inference.settings import network_size_divisor


class LabelsToImage(nn.Module):
    """Label maps (N x H x W class ids as floats; the don't-care value for don't-care pixels) and
    noise (N x noise_dim; none for a generator without noise) -> images in [0, 1] of the label
    maps' size: the one-hot map padded with "no class" to the generator's size divisor and the
    image cropped back, in a form a trace keeps for every size (`traceable_pad`), so tools/infer.py
    and the exported model run the same graph. The one-hot encoding is a comparison with the class
    ids, which every exporter knows."""

    def __init__(self, generator: nn.Module, num_classes: int, ignore_index: int):
        super().__init__()
        self.generator, self.ignore_index, self.num_classes = generator, ignore_index, num_classes
        self.noise_dim = generator.noise_dim  # 0: the module takes the label maps alone
        self.divisor = network_size_divisor(generator)
        channels = num_classes + int(generator.contain_dontcare_label)
        ids = torch.arange(channels, dtype=torch.float32)
        if generator.contain_dontcare_label:
            ids[-1] = ignore_index
        self.register_buffer("ids", ids.view(1, -1, 1, 1))

    def example_inputs(self, size: tuple[int, int], batch: int, seed: int) -> tuple[torch.Tensor, ...]:
        """Label maps of random classes (and noise when the generator takes it), drawn from `seed`."""
        return example_inputs("labels", size, batch, self.num_classes, seed, self.noise_dim)

    def forward(self, labels: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        height, width = labels.shape[-2], labels.shape[-1]
        one_hot = traceable_pad((labels[:, None] == self.ids).to(torch.float32), self.divisor)
        return to_unit(self.generator(one_hot, noise))[..., :height, :width]
