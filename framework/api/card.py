"""The README.md of a model folder: what the model is, what it takes, how well its run did, what it
trained on, and the command that trains it again. Everything comes from the model itself (its task,
its resolved config, the metrics of its run), so the card cannot drift from the weights."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

import framework
from framework.inference.settings import network_size_divisor
from framework.tasks.base import GeneratorTask

INPUTS = {"image": "an RGB image, translated to an image of the same size",
          "unpaired": "an RGB image of one domain, translated to the other (direction AtoB or BtoA)",
          "labels": "a label map (H x W class ids), turned into an image of its size; noise drawn per map",
          "noise": "nothing: images from noise, each named by a seed and an index"}


def final_metrics(work_dir: Path | None) -> dict:
    """The last evaluation in <work_dir>/metrics.jsonl ({} without one): the run's final numbers."""
    path = None if work_dir is None else Path(work_dir) / "metrics.jsonl"
    if path is None or not path.is_file():
        return {}
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    evaluations = [record for record in records if "stopped_early" not in record]
    return evaluations[-1] if evaluations else {}


def input_rules(model) -> str:
    task = model.task
    if isinstance(task, GeneratorTask):
        divisor = network_size_divisor(task.generator_for(task.directions[0] if task.directions else None))
        rule = INPUTS.get(task.conditioning, task.conditioning)
        return rule if task.conditioning == "noise" else (
            f"{rule}; any size (padded to a multiple of {divisor} and cropped back)")
    settings = task.inference
    return (f"{task.in_channels}-channel images (uint8) of any size, padded to a multiple of "
            f"{network_size_divisor(task.model)} and cropped back; inference: mode {settings.mode}, "
            f"flip {settings.flip}, scales {list(settings.scales)}")


def model_card(model) -> str:
    config = model.config
    task = model.task
    kind = type(task).__name__
    classes = model.classes
    metrics = {k: v for k, v in model.metrics.items() if k not in ("iter", "epoch")}
    lines = [f"# {config.get('name') or kind}", "",
             f"A {kind} saved by segan {framework.__version__} (`Model.save_pretrained`).", "",
             "```python", "import framework", "", "model = framework.load(\"path/to/this/folder\")", "```", "",
             "## Task", "", f"- type: `{config['task'].get('type', kind)}`",
             f"- input: {input_rules(model)}"]
    if classes:
        lines.append(f"- classes ({len(classes)}): {', '.join(classes)}")
    lines += ["", "## Metrics", ""]
    if metrics:
        where = f" at iteration {model.metrics['iter']}" if "iter" in model.metrics else ""
        lines += [f"The run's final evaluation{where}:", "", "| metric | value |", "| --- | --- |"]
        lines += [f"| {name} | {value:.4f} |" if isinstance(value, float) else f"| {name} | {value} |"
                  for name, value in metrics.items()]
    else:
        lines.append("No evaluation recorded (the model was not loaded from a run with metrics.jsonl).")
    dataset = (config.get("data") or {}).get("train", {}).get("dataset")
    lines += ["", "## Training data", "", "```yaml", yaml.safe_dump(dataset, sort_keys=False).rstrip(), "```", "",
              "## Reproduce", "", "The resolved config of the run is config.yaml:", "", "```bash",
              "python tools/train.py --config config.yaml --work-dir work_dirs/reproduced", "```", ""]
    return "\n".join(lines)
