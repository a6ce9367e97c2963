"""Using a trained model: predictors (segmentation, generators), input/output, export.

Owns: the `inference:` settings and a network's size divisor (`settings.py`), the segmentation
predictor: whole/sliding window, flip and scale TTA (`segmentation.py`), the generator predictor
(`generator.py`), per-item seeded noise (`noise.py`), input gradients and SmoothGrad
(`saliency.py`), the result files of tools/infer.py and the inputs that would clash there
(`result_files.py`), its arrays to tensors and back (`arrays.py`), ONNX/TorchScript export (`export.py`).
May import: errors, dist (DDP unwrapping); never tasks, which use these predictors.

Kept free of imports so `framework.tasks` can use the segmentation predictor without a cycle.
"""
