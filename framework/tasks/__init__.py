from framework.tasks import cyclegan, gan, segmentation  # noqa: F401  (fill the registry)
from framework.tasks.base import Task, frozen, unwrap  # noqa: F401
