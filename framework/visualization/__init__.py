"""Pictures of data and results: arrays, tensors and PNG files.

Owns: class colours (`palette.py`), side-by-side panels (`panels.py`), palette masks and overlays
(`masks.py`), the confusion-matrix heat map (`heatmap.py`).
May import: errors; otherwise torch, numpy, OpenCV and Pillow only.
"""

