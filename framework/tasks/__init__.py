"""What one training step means: importing this package registers the tasks in TASKS.

Owns: the `Task` contract, `UpdatesNetworks` and `frozen` (`base.py`), `SegmentationTask`,
`GANTask`, `CycleGANTask` and the GAN parts (discriminator step, EMA, image pool, replay, health
warnings).
May import: errors, registry, dist, models, losses, visualization, inference (the predictors);
never optim, checkpoint or the engine (a task only asks `optim` for updates).
"""

from framework.dist import unwrap  # noqa: F401  (one unwrap for all: tasks/base.py's own is to go)
from framework.tasks import cyclegan, gan, segmentation  # noqa: F401  (fill the registry)
from framework.tasks.base import Task, frozen  # noqa: F401
