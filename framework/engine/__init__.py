"""The training loop and what runs around it.

Owns: `Trainer` (`trainer.py`: the loop and the hook order), the build order of a run
(`build.py`), hooks (`hooks/`), resume (`resume.py`), stop signals (`stop.py`), evaluation
(`evaluation.py`), the start-up checks on the first two samples (`startup_check.py`) and of a
label-conditioned task's data (`label_map_data.py`), the non-finite guard (`nonfinite.py`), random states (`random_state.py`),
what is loaded before training (`pretrained.py`), a trained task for the tools (`trained.py`),
per-network settings (`network_settings.py`). The process around the loop (precision, malloc,
compile, the tools' error lines, the work-dir lock) is framework.runtime's.
May import: framework (its `__init__.py`), errors, registry, serialization, config, dist, data,
models, losses, metrics, visualization, inference, analysis, tasks, optim, checkpoint, weights,
runtime (every framework package); only tools/ and projects/ import the engine.

Nothing is imported here. The registries import hooks on their first lookup
(framework/registry.py).
"""
