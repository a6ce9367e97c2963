"""Configs: YAML files with `_base_` inheritance, `key=value` overrides, the schema and custom imports.

Owns: reading config files (`files.py`), the public keys' defaults and ranges (`schema.py`, written
with the rules of `rules.py`), overrides and validation (`loading.py`), which way a metric improves (`metric_direction.py`), and locating the user
modules a config names (`custom_imports.py`).
May import: `framework.registry` and `framework.errors`; no torch, so a tool can validate a
config and answer `--help` before paying for torch.

    from framework.config import load_config
    cfg = load_config("configs/segmentation/unet_shapes.yaml", ["optim.lr=0.01"])
"""

from framework.config.custom_imports import import_custom_modules, locate
from framework.config.loading import (
    apply_override,
    check_config,
    default_work_dir,
    load_config,
    parse_override,
    save_config,
)
from framework.config.schema import DEFAULTS, SCHEMA
from framework.registry import to_plain

__all__ = ["DEFAULTS", "SCHEMA", "apply_override", "check_config", "default_work_dir", "import_custom_modules",
           "load_config", "locate", "parse_override", "save_config", "to_plain"]
