"""Run checkpoints on disk.

Owns: the run folder's layout, `checkpoints/iter_<N>.pth`, `latest`, `best.pth`, which checkpoint
to resume and whether a folder holds a run (`run_folder.py`); atomic checkpoint writes, the
`latest` pointer's writes and retention (`files.py`; safe reads are framework.serialization's).
May import: errors, serialization; never the engine. Weights from elsewhere (partial
loading, encoder weights, stem adaptation) are framework.weights'.
"""
