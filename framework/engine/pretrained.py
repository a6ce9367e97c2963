"""Starting from pretrained weights, partially; freezing; BatchNorm kept in eval mode.

Two ways to load weights, with the same options:

    load_from: work_dirs/old_run/checkpoints/best.pth     # the whole task (applied last)
    task:
      model:
        type: DeepLabV3
        num_classes: 5
        init:                                   # one network (any model node)
          checkpoint: resnet50.pth              # .pth / .pt (torch.load, weights_only) or .safetensors
          prefix: ""                            # only keys starting with it, which it is cut from
          rename: {"^": "net.backbone."}        # regex -> replacement, applied in order
          strict: false                         # true: any missing/unexpected/reshaped key is an error
          min_loaded_ratio: 0.5                 # error when less of the network than this was loaded
          adapt_in_channels: zeros              # or mean: a stem of other input channels is adapted, not skipped
        frozen: [net.backbone.conv1, net.backbone.bn1, net.backbone.layer1]   # or true: all of it
        norm_eval: true                         # every BatchNorm of the network stays in eval mode

`load_from` and `init` also take just a path. The file may be a plain state dict, a training
checkpoint of this framework (its task weights are used) or a dict holding the state dict
under `state_dict` or `model`. `module.` (DDP) and `_orig_mod.` (torch.compile) path components
are ignored when matching names. Tensors whose shape differs from the network's (a new
number of classes) are skipped, not loaded. Each load prints a table and everything lands
in `<work_dir>/load_report.json`: loaded, missing, unexpected and shape-mismatched keys with
shapes, and counts.

Frozen submodules get no gradient (they are left out of the optimizers) and stay in eval mode,
so their BatchNorm statistics do not drift either. A resumed run skips the loading (the
checkpoint has the weights) but freezes as configured.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from torch import nn

from framework.checkpoint.files import atomic_write_bytes
from framework.engine.network_settings import configured_networks
from framework.weights import encoder_weights
from framework.weights.partial_load import REPORT_FILE, LoadReport, LoadSpec, load_into

logger = logging.getLogger("framework")

# load_from without min_loaded_ratio: at least half of the task must come from the file (a new
# head for other classes passes; a checkpoint of other widths, where ~1% matches, does not).
LOAD_FROM_MIN_LOADED_RATIO = 0.5


def load_pretrained(task: nn.Module, load_from, work_dir: str | None, write_report: bool = True) -> list[LoadReport]:
    """Every network's `init`, then `load_from` into the whole task; tables logged, report written."""
    reports = []
    for name, network in encoder_weights.networks_with_encoder_weights(task):  # the model's own start
        where = f"task.{name}".rstrip(".")
        reports.append(load_into(network, encoder_weights.encoder_load_spec(network, where), f"{where} (encoder_weights)"))
        logger.info(encoder_weights.encoder_summary(reports[-1], network))
    for name, network, settings in configured_networks(task):
        if settings.get("init") is not None:
            spec = LoadSpec.from_config(settings["init"], f"{settings['path']}.init")
            reports.append(load_into(network, spec, target=f"task.{name}"))
    if load_from:
        spec = LoadSpec.from_config(load_from, "load_from", default_ratio=LOAD_FROM_MIN_LOADED_RATIO)
        reports.append(load_into(task, spec, target="task"))
    for report in reports:
        logger.info(report.table())
        if not report.target.endswith("(encoder_weights)"):  # that one's line says it: decoder and head new
            logger.info(report.left_random())
    if reports and work_dir and write_report:
        path = Path(work_dir) / REPORT_FILE
        text = json.dumps({r.target: r.to_json() for r in reports}, indent=2) + "\n"
        atomic_write_bytes(path, lambda f: f.write(text.encode()))
        logger.info(f"load report written to {path}")
    return reports
