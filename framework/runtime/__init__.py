"""The process a run lives in, apart from the training loop.

Owns: CPU precision and AMP decisions (`precision.py`), malloc tuning (`malloc.py`), intra-op threads (`threads.py`),
`torch.compile` settings (`compile.py`), the tools' one-line error handling and start-up
(`cli.py`), the work-dir lock (`workdir.py`), the refusal to write over a file a tool reads
(`overwrite.py`).
May import: errors, registry, config (the amp keys' messages), checkpoint (the run folder's layout); never
the engine.

Nothing is imported here: `framework.runtime.cli` (what the tools load before the config is
validated) must not pull in torch.
"""
