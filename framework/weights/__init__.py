"""Foreign weights into networks: what a run starts from, not what it resumes.

Owns: partial loading with a report (`partial_load.py`); the file behind
`encoder_weights: torchvision | timm` (`encoder_weights.py`); adapting a stem to another number
of input channels (`stem_adapt.py`).
May import: errors, registry, serialization (safe reads), models (the encoders' stem rule);
never the engine. What is loaded when, before training, is the engine's decision
(framework/engine/pretrained.py).
"""
