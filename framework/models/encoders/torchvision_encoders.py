"""torchvision classification networks as encoders, through torchvision's feature extraction.

`create_feature_extractor` traces the network and returns the outputs of the named nodes,
keeping torchvision's parameter names (`conv1.weight`, `layer1.0.bn1.running_mean`, ...),
so a torchvision weights file loads into `encoder.body` unchanged. Layers after the deepest
returned node (the classifier) are dropped. Nodes follow segmentation_models_pytorch's choice
of stages: one map per stride 2, 4, 8, 16, 32 (ConvNeXt starts at 4). `depth` keeps the first
maps only (smp's `encoder_depth`), and the stages after them are not built into the extractor.
"""

from __future__ import annotations

import torch
from torch import nn

from framework.models.encoders.base import ENCODERS, Encoder, check_depth

RESNET_NODES = ["relu", "layer1", "layer2", "layer3", "layer4"]
EFFICIENTNET_NODES = ["features.1", "features.2", "features.3", "features.5", "features.7"]
CONVNEXT_NODES = ["features.1", "features.3", "features.5", "features.7"]
REGNET_NODES = ["stem"] + [f"trunk_output.block{i}" for i in range(1, 5)]
# Output stride -> dilation of the stages whose stride is traded for it (DeepLab's trick); each
# stage's first block takes half of it (`dilate`).
RESNET_DILATION = {32: {}, 16: {"layer4": 2}, 8: {"layer3": 2, "layer4": 4}}


class TorchvisionEncoder(Encoder):
    """torchvision model `name` (random init, nothing downloaded) returning the maps of `nodes`."""

    weights_prefix = "body."

    def __init__(self, name: str, nodes: list[str], in_channels: int = 3, output_stride: int = 32,
                 dilations: dict[str, int] | None = None, depth: int | None = None):
        super().__init__()
        if in_channels < 1:
            raise ValueError(f"in_channels must be >= 1, got {in_channels}")
        check_depth(depth, len(nodes), name)
        import torchvision  # imported when an encoder is built, not with the registry
        from torchvision.models.feature_extraction import create_feature_extractor

        model = torchvision.models.get_model(name, weights=None)
        for stage, dilation in (dilations or {}).items():
            dilate(model.get_submodule(stage), dilation)
        if in_channels != 3:
            replace_first_conv(model, in_channels)
        self.torchvision_name = name
        self.in_channels = in_channels
        self.nodes = list(nodes)
        self.body = create_feature_extractor(model, {node: node for node in nodes})
        self.channels, self.strides = _probe(self.body, in_channels)
        if self.strides[-1] != output_stride:
            raise ValueError(f"encoder {name} has output stride {self.strides[-1]}; "
                             f"output_stride {output_stride} is available for ResNets only")
        if depth is not None and depth < len(nodes):  # the stages after the kept maps are dropped
            self.nodes = self.nodes[:depth]
            self.body = create_feature_extractor(model, {node: node for node in self.nodes})
            self.channels, self.strides = self.channels[:depth], self.strides[:depth]

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return list(self.body(x).values())


def replace_first_conv(model: nn.Module, in_channels: int) -> None:
    """Swap the network's first convolution for one taking `in_channels` (freshly initialised;
    pretrained stems are adapted when weights load, framework/weights/stem_adapt.py)."""
    name, conv = next((n, m) for n, m in model.named_modules() if isinstance(m, nn.Conv2d))
    model.set_submodule(name, nn.Conv2d(in_channels, conv.out_channels, conv.kernel_size, conv.stride,
                                        conv.padding, conv.dilation, conv.groups, conv.bias is not None))


def dilate(stage: nn.Module, dilation: int) -> None:
    """Stride 1 for every conv of `stage`, in place; `dilation` for the 3x3 convs of its blocks
    after the first, and half of it for the first block's (the first block still sees the
    previous stage's sampling grid). That is torchvision's replace_stride_with_dilation (its first
    block keeps `previous_dilation`), mmseg's ResLayer with contract_dilation=True (its DeepLab
    configs) and timm's output_stride; smp's make_dilated dilates every block alike, which
    over-dilates layer3.0 and layer4.0 (2 and 4 at output stride 8 instead of 1 and 2). The
    weights keep their shapes, so pretrained files still load. torchvision's own
    replace_stride_with_dilation does not support the BasicBlocks of resnet18/34."""
    blocks = list(stage.children()) if isinstance(stage, nn.Sequential) else [stage]
    for index, block in enumerate(blocks):
        block_dilation = max(dilation // 2, 1) if index == 0 else dilation
        for conv in block.modules():
            if isinstance(conv, nn.Conv2d):
                conv.stride = (1, 1)
                if conv.kernel_size[0] > 1:
                    conv.dilation = (block_dilation, block_dilation)
                    conv.padding = (block_dilation * (conv.kernel_size[0] // 2),) * 2


@torch.no_grad()
def _probe(body: nn.Module, in_channels: int, size: int = 64) -> tuple[list[int], list[int]]:
    """Channels and strides of the returned maps, from one forward in eval mode (so BatchNorm
    statistics are untouched)."""
    was_training = body.training
    body.eval()
    features = list(body(torch.zeros(1, in_channels, size, size)).values())
    body.train(was_training)
    return [f.shape[1] for f in features], [size // f.shape[-1] for f in features]


def register_torchvision(name: str, nodes: list[str]) -> None:
    """Register torchvision model `name` as an encoder returning the outputs of `nodes`."""

    def factory(in_channels: int = 3, output_stride: int = 32, depth: int | None = None) -> TorchvisionEncoder:
        return TorchvisionEncoder(name, nodes, in_channels, output_stride, depth=depth)

    ENCODERS.add(factory, name)


def register_resnet(name: str) -> None:
    def factory(in_channels: int = 3, output_stride: int = 32, depth: int | None = None) -> TorchvisionEncoder:
        if output_stride not in RESNET_DILATION:
            raise ValueError(f"output_stride must be one of {sorted(RESNET_DILATION)}, got {output_stride}")
        return TorchvisionEncoder(name, RESNET_NODES, in_channels, output_stride, RESNET_DILATION[output_stride],
                                  depth)

    ENCODERS.add(factory, name)


for _name in ("resnet18", "resnet34", "resnet50", "resnet101"):
    register_resnet(_name)
register_torchvision("mobilenet_v3_large", ["features.1", "features.3", "features.6", "features.12", "features.16"])
for _i in range(5):
    register_torchvision(f"efficientnet_b{_i}", EFFICIENTNET_NODES)
for _name in ("convnext_tiny", "convnext_small"):
    register_torchvision(_name, CONVNEXT_NODES)
for _name in ("regnet_y_400mf", "regnet_y_800mf"):
    register_torchvision(_name, REGNET_NODES)
