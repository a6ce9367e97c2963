"""timm networks as encoders: `encoder: timm:<name>` (an optional extra, `pip install -e ".[timm]"`).

Any timm model with `forward_intermediates` (timm >= 1.0: ResNets, EfficientNets, MobileNets,
ConvNeXts, RegNets and most other convolutional families) returns the maps of its
`feature_info` stages. The timm model is kept whole as `self.model` (only its classifier and
the stages after the kept maps are pruned), so a timm weights file loads with its own names:
`encoder_weights: PATH` or `encoder_weights: timm` (the file timm would download, from the
local Hugging Face cache: framework/weights/encoder_weights.py). A name with a pretrained tag
(`timm:resnet18.a1_in1k`) picks the tag's weights file.

Plain (non-hierarchical) transformers such as ViT return every map at one stride and a fixed
input size: the decoders here expect a pyramid, so use convolutional or hierarchical ones.
"""

from __future__ import annotations

import torch

from framework.models.encoders.base import Encoder, check_depth, register_family

INSTALL_HINT = 'pip install -e ".[timm]"'


def import_timm(what: str):
    try:
        import timm
    except ImportError as err:
        raise ValueError(f"{what} needs timm, an optional extra: {INSTALL_HINT}") from err
    return timm


class TimmEncoder(Encoder):
    """timm model `name` (random init, nothing downloaded) returning its stage maps, shallow to deep."""

    weights_prefix = "model."

    def __init__(self, name: str, in_channels: int = 3, output_stride: int = 32, depth: int | None = None):
        super().__init__()
        timm = import_timm(f"encoder 'timm:{name}'")
        if in_channels < 1:
            raise ValueError(f"in_channels must be >= 1, got {in_channels}")
        if not timm.is_model(name.split(".")[0]):
            from framework.registry import did_you_mean

            raise ValueError(f"timm has no model {name!r}{did_you_mean(name, timm.list_models())}")
        options = {} if output_stride == 32 else {"output_stride": output_stride}
        try:
            model = timm.create_model(name, pretrained=False, in_chans=in_channels, **options)
        except (TypeError, AssertionError) as err:  # a family without dilation takes no output_stride
            raise ValueError(f"timm model {name!r} cannot be built with output_stride {output_stride} ({err})") from err
        except RuntimeError as err:  # an unknown pretrained tag
            raise ValueError(f"timm: {err}") from err
        if not hasattr(model, "forward_intermediates"):
            raise ValueError(f"timm model {name!r} has no forward_intermediates (timm >= 1.0 gives it to most "
                             "convolutional families); choose another model")
        stages = len(model.feature_info)
        check_depth(depth, stages, f"timm:{name}")
        self.indices = list(range(depth or stages))
        model.prune_intermediate_layers(self.indices, prune_head=True)  # drops the classifier and later stages
        self.model = model
        self.in_channels = in_channels
        self.timm_name = name
        self.channels = [model.feature_info[i]["num_chs"] for i in self.indices]
        self.strides = [model.feature_info[i]["reduction"] for i in self.indices]
        if max(self.strides) != output_stride and depth is None:
            raise ValueError(f"timm model {name!r} has output stride {max(self.strides)}, not {output_stride}")

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return self.model.forward_intermediates(x, indices=self.indices, intermediates_only=True)


register_family("timm", TimmEncoder)  # timm itself is imported only when one is built
