"""Weights on disk: checkpoint files and loading weights into networks.

Owns: atomic checkpoint writes, the `latest` pointer and retention (`files.py`; safe reads are
framework.serialization's); partial loading with a report (`partial_load.py`); the file behind
`encoder_weights: torchvision | timm` (`encoder_weights.py`); adapting a stem to another
number of input channels (`stem_adapt.py`).
May import: registry, errors, serialization, models (the encoders' stem rule); never the engine. What is
loaded when, before training, is the engine's decision (framework/engine/pretrained.py).
"""
