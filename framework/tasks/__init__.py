"""What one training step means: importing this package registers the tasks in TASKS.

Owns: the `Task` contract, `UpdatesNetworks`, `frozen`, `Counter` and the `GeneratorTask`
interface (`base.py`), `SegmentationTask`, `GANTask`, `CycleGANTask` and the GAN parts they are
built of: `Adversary` (adversary.py: one discriminator's side), `EMA` (ema.py), the discriminator
step's pieces (discriminator_step.py), image pools, replay, health warnings.
May import: errors, registry, dist, models, losses, visualization, inference (the predictors);
never optim, checkpoint or the engine (a task only asks `optim` for updates).
"""

from framework.tasks import cyclegan, gan, segmentation, synthesis  # noqa: F401  (fill the registry)
from framework.tasks.base import Task, frozen  # noqa: F401
