"""Looking at data and models: dataset scans, class weights, parameter and FLOP counts.

Owns: one pass over a segmentation dataset's raw files (`dataset_scan.py`) and over a GAN
dataset's images (single, paired, unpaired: `image_scan.py`), `weight: auto` class
weights with their cache, counted on rank 0 and broadcast (`class_weights.py`), parameter and
FLOP counts per module (`model_stats.py`).
May import: errors, dist, data, losses, inference; never tasks or the engine (the engine hands
them the task and dataset).
"""
