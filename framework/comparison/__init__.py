"""Comparing configs over seeds: every (config, seed) pair trained as an ordinary run, then one
report of what each config reached and how far the seeds spread.

Owns: the comparison's plan and its checks before anything runs (`plan.py`: configs, seeds,
metric names, the pairs' folders, the cores each run gets), running the pairs as `tools/train.py`
processes, a few at a time, resumable (`runner.py`), each ending with the comparison (`child_process.py`), the summary read from each run's
metrics.jsonl (`summary.py`: mean, spread, paired differences, best against last; JSON and
markdown) and the curves' picture (`plot.py`); beyond this machine, the pairs as one Slurm job array
(`slurm_launcher.py`, each task `slurm_task.py`) or claimed by workers sharing the work dir
(`worker.py`), and where each run stands for `--report` (`status.py`).
May import: framework, errors, registry, config, metrics, checkpoint (whether a work dir holds a run); never the
engine: a pair is a separate training process, started with the command the caller gives.
"""
