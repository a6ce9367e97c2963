"""Using a trained model: predictors (segmentation, generators), input/output, export.

Owns: the `inference:` settings and a network's size divisor (`settings.py`), the segmentation
predictor: whole/sliding window, flip and scale TTA (`segmentation.py`), the generator predictor
(`generator.py`), ONNX/TorchScript export (`export.py`).
May import: errors, dist (DDP unwrapping); never tasks, which use these predictors.

Kept free of imports so `framework.tasks` can use the segmentation predictor without a cycle.
"""
