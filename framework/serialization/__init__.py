"""Reading weight files without running code from them: `torch.load(weights_only=True)` or
safetensors, and, when torch refuses a file, whether it was for pickled objects (refused as
unsafe, named) or for damaged bytes. At the bottom of the layers: checkpoints, pretrained
weights, the perceptual loss's VGG and FID's Inception all read their files through it.

Owns: `read_weights_file` and `UnsafeCheckpointError` (`weights_file.py`), what a refused pickle
would import and its protocol (`pickle_globals.py`).
May import: errors (and torch, safetensors); nothing else of the framework."""
