"""Run checkpoints on disk.

Owns: atomic checkpoint writes, the `latest` pointer and retention (`files.py`; safe reads are
framework.serialization's).
May import: registry, errors, serialization; never the engine. Weights from elsewhere (partial
loading, encoder weights, stem adaptation) are framework.weights'.
"""
