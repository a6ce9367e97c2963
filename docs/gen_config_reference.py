"""Write docs/config-reference.md: every config key with its type and range, default and meaning.

    python docs/gen_config_reference.py           # rewrite the page
    python docs/gen_config_reference.py --check   # exit 1 when the page is stale (tests/test_docs.py)

Types and ranges come from the rules of `SCHEMA` (framework/config/schema.py), defaults from
`DEFAULTS` and the component defaults the schema's sections stand for (the loader's
`LOADER_KEYS`, `LoadSpec`, torch's `clip_grad_norm_`). The meaning of a key is the comment next
to its default in the source; keys whose default has no comment there are described in
`DESCRIPTIONS` below. A key with neither is an error, so a new key cannot go undocumented.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import io
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from framework.config.rules import INFINITY_ALLOWED, REQUIRED  # noqa: E402
from framework.config.schema import DEFAULTS, LOAD_SPEC, SCHEMA  # noqa: E402

PAGE = ROOT / "docs" / "config-reference.md"

# Meanings of keys whose default carries no comment in the source, by "section.key".
DESCRIPTIONS = {
    ".work_dir": "the run's folder (`--work-dir` wins); null: `work_dirs/<config file name>`",
    ".seed": "seed of every random generator (python, numpy, torch; per process and per sample)",
    ".task": "the task node: `SegmentationTask`, `GANTask` or `CycleGANTask` with its model(s), loss and settings",
    ".data": "the loaders: `train`, `val` and optional `test`",
    ".amp": "mixed precision (automatic mixed precision, autocast)",
    ".dist": "multi-process settings (torchrun), ignored in a single process",
    ".train": "the loop: length, intervals, checkpoints, accumulation, divergence policy",
    ".metrics": "metric nodes computed at evaluation: `[{type: SegmentationMetrics}]`, `[{type: PSNR}, ...]`",
    "data.train": "the training loader (also `data.val`, evaluation during training, and `data.test`, tools/test.py)",
    "data.val": "the evaluation loader used during training (and by tools/test.py without `data.test`)",
    "data.test": "the loader tools/test.py evaluates (falls back to `data.val`)",
    "data.train.dataset": "the dataset node: `{type: SyntheticShapes, ...}`, `ImageMaskFolder`, `VOCSegmentation`, yours",
    "data.train.batch_size": "samples per process per micro-batch (the global batch is processes x batch_size x accumulate)",
    "data.train.num_workers": "loader worker processes; auto: none on a CPU with up to 4 cores or with a cache, "
                              "cores // 4 (at most 8) on more, cores - 1 (at most 8) on CUDA",
    "data.train.persistent_workers": "keep the worker processes alive between epochs (with num_workers > 0)",
    "optim.type": "a `torch.optim` optimizer by class name (`AdamW`, `SGD`, ...); other keys go to its constructor",
    "optim.lr": "the learning rate of the first parameter group (the one logged)",
    "optim.weight_decay": "the optimizer's weight decay",
    "optim.momentum": "the optimizer's momentum (SGD, RMSprop)",
    "optim.eps": "the optimizer's epsilon",
    "optim.params": "submodule name(s) of the task whose trainable parameters this optimizer updates (default: all)",
    "optim.clip_grad": "clip the gradient norm before each step (after unscaling under float16 AMP)",
    "optim.scheduler": "an LR scheduler node stepped every iteration: `{type: WarmupPolyLR, warmup_iters: 100}`",
    "optim.clip_grad.max_norm": "the largest total gradient norm; larger gradients are scaled down",
    "optim.clip_grad.norm_type": "the p of the p-norm",
    "optim.clip_grad.error_if_nonfinite": "raise when the gradient norm is NaN or inf",
    "optim.clip_grad.foreach": "torch's multi-tensor implementation (null: torch chooses)",
    "amp.enabled": "run the task's forward under autocast (mixed precision); auto: bfloat16 where the CPU (AMX-BF16, AVX512-BF16) or GPU computes it natively, float32 elsewhere",
    "dist.broadcast_buffers": "DDP broadcasts buffers (BatchNorm statistics) from rank 0 every forward",
    "train.max_iters": "optimizer steps to train (give this or `max_epochs`); `1e4` is read as 10000",
    "train.log_interval": "iterations between log lines and TensorBoard scalars (0: never)",
    "train.ckpt_interval": "iterations between checkpoints (0: only the last one)",
    "train.best_mode": "whether a larger (max) or smaller (min) `best_metric` is better; auto: from the metric's "
                       "name (mIoU, accuracy, PSNR, SSIM, MS-SSIM: max; loss, FID, KID, SWD, L1: min; "
                       "framework/config/metric_direction.py), another name must say",
    "load_from.checkpoint": "the file: `.pth` / `.pt` (a training checkpoint too) or `.safetensors`",
    "load_from.prefix": "keep only the file's keys starting with this, and cut it off",
    "load_from.rename": "`{regex: replacement}` applied to the file's keys, in order",
    "load_from.strict": "any missing, unexpected or reshaped key is an error",
    "load_from.min_loaded_ratio": "an error when less than this share of the network's tensors was loaded",
}

# Keys of an optimizer entry that the framework reads but SCHEMA leaves open (the entry is checked
# when its optimizer is built): render() fails when framework/optim's ENTRY_KEYS has one that is
# neither in SCHEMA nor here.
OPTIMIZER_ENTRY_KEYS = {
    "param_groups": ("a list of {params, name, lr_mult, ...} or null",
                     "split the entry's parameters: each group's `params` names submodules of the task, `lr_mult` "
                     "scales the entry's `lr`, other keys are the optimizer's; the rest form the first group "
                     "([Encoders](encoders.md#learning-rates-and-a-frozen-start))"),
}

# Sections of SCHEMA (and LOAD_SPEC) documented under a heading of their own, by their first path.
SECTION_DEFAULTS = {"": DEFAULTS, "amp": DEFAULTS["amp"], "dist": DEFAULTS["dist"], "train": DEFAULTS["train"]}

INTRO = """\
# Config reference

<!-- Generated by docs/gen_config_reference.py from framework/config/schema.py: do not edit by hand.
     Run `python docs/gen_config_reference.py` after changing a key; tests/test_docs.py fails when this page is stale. -->

Every key a config may have, with the type and range `load_config` checks (after `_base_`
merging, `key=value` overrides and `${...}` interpolation, before anything is built), its
default, and what it does. A key not listed here is an error naming it, with close matches.
Component nodes (`task`, datasets, models, losses, metrics, hooks, schedulers) take the
keywords of their class: see [Configs](configs.md) and the pages of each part.

No number of a config, here or in a component's keywords, may be NaN or infinite (`.nan`, `.inf`;
in a component's keywords also the words `nan`, `inf`, which Python would read as numbers): it is
refused naming its key. The one exception is infinity where
it means something: {allowed}.
"""


def source_comments(path: Path, dict_name: str) -> dict[str, str]:
    """The comment next to each key of the dict literal `dict_name` in `path`, by dotted path
    (nested dicts give `amp.enabled`); a comment-only line right after a key's line continues it."""
    text = path.read_text()
    comments: dict[int, str] = {}
    code_lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
        elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            code_lines.add(token.start[0])
    found: dict[str, str] = {}

    def visit(node: ast.Dict, prefix: str) -> None:
        for key, value in zip(node.keys, node.values):
            name = prefix + key.value
            # a nested dict's own line holds its first key's comment, not the dict's
            parts = [comments[key.lineno]] if key.lineno in comments and not isinstance(value, ast.Dict) else []
            following = value.end_lineno + 1
            while parts and following in comments and following not in code_lines:
                parts.append(comments[following])
                following += 1
            if parts:
                found[name] = " ".join(parts)
            if isinstance(value, ast.Dict):
                visit(value, name + ".")

    for statement in ast.parse(text).body:
        target = getattr(statement, "target", None) or (getattr(statement, "targets", None) or [None])[0]
        if getattr(target, "id", None) == dict_name and isinstance(statement.value, ast.Dict):
            visit(statement.value, "")
    return found


def component_defaults() -> dict[str, dict]:
    """Defaults that live with the components a section configures (imports torch)."""
    import torch

    from framework.data.loader import LOADER_KEYS
    from framework.weights.partial_load import LoadSpec

    clip = inspect.signature(torch.nn.utils.clip_grad_norm_).parameters
    return {"data.train": {**LOADER_KEYS, "dataset": REQUIRED},
            "optim.clip_grad": {k: clip[k].default for k in ("norm_type", "error_if_nonfinite", "foreach")},
            "load_from": {f.name: f.default_factory() if f.default_factory is not dataclasses.MISSING
                          else REQUIRED if f.default is dataclasses.MISSING else f.default
                          for f in dataclasses.fields(LoadSpec)}}


def meanings() -> dict[str, str]:
    found = {f".{k}" if "." not in k else k: v for k, v in
             source_comments(ROOT / "framework/config/schema.py", "DEFAULTS").items()}
    found.update({f"data.train.{k}": v for k, v in
                  source_comments(ROOT / "framework/data/loader.py", "LOADER_KEYS").items()})
    spec = inspect.getsource(__import__("framework.weights.partial_load", fromlist=["LoadSpec"]).LoadSpec)
    for line in spec.splitlines():
        if ":" in line and "#" in line and "=" in line:
            found[f"load_from.{line.split(':')[0].strip()}"] = line.split("#", 1)[1].strip()
    return {**found, **DESCRIPTIONS}


NONE = object()  # a key without a default of its own (the component's, or nothing)


def shown(value) -> str:
    if value is NONE:
        return "-"
    if value == REQUIRED:
        return "required"
    if value == "the optimizer's":
        return value
    if isinstance(value, dict):
        return "see below" if value else "`{}`"
    if isinstance(value, bool) or value is None:
        return f"`{str(value).lower() if value is not None else 'null'}`"
    return f"`{value!r}`" if value == "" else f"`{value}`"


def cell(text: str) -> str:
    """Markdown table cell: `|` would end the cell and `<name>` would be read as HTML, outside code."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def subsection(rule):
    """The `section` a rule stands for (through `optional` and `each`), else None."""
    while rule is not None and not hasattr(rule, "fields"):
        rule = getattr(rule, "inner", None)
    return rule


def optimizer_entry_rows(rule) -> list[str]:
    from framework.optim.optimizers import ENTRY_KEYS

    rows = []
    for name in ENTRY_KEYS:
        if name in rule.fields:
            continue
        if name not in OPTIMIZER_ENTRY_KEYS:
            raise SystemExit(f"optim.{name}: an optimizer entry key neither in SCHEMA nor in OPTIMIZER_ENTRY_KEYS "
                             "of docs/gen_config_reference.py")
        expects, meaning = OPTIMIZER_ENTRY_KEYS[name]
        rows.append(f"| `{name}` | {cell(expects)} | `null` | {cell(meaning)} |")
    return rows


def names_chosen_by_user(rule) -> bool:
    """Whether `rule` is (an optional) `each(...)`: a mapping of user names to sections."""
    while rule is not None and not hasattr(rule, "fields"):
        if hasattr(rule, "inner") and rule.expects == "a mapping":
            return True
        rule = getattr(rule, "inner", None)
    return False


def render() -> str:
    describe = meanings()
    defaults = {**SECTION_DEFAULTS, **component_defaults()}
    used: set[str] = set()
    undescribed: list[str] = []
    queue = [("", SCHEMA)]
    seen: dict[int, str] = {id(SCHEMA): ""}
    aliases: dict[str, list[str]] = {}
    out = [INTRO.replace("{allowed}", "; ".join(f"`{key}: .inf` ({meaning})" for key, meaning in INFINITY_ALLOWED.items()))]
    index = 0
    while True:
        if index == len(queue):  # every section of SCHEMA is out: then the weights-file keys
            if id(LOAD_SPEC) in seen:
                break
            seen[id(LOAD_SPEC)] = "load_from"
            queue.append(("load_from", LOAD_SPEC))
        path, rule = queue[index]
        index += 1
        title = "Top-level keys" if not path else " / ".join(f"`{p}`" for p in [path, *aliases.get(path, [])])
        out += [f"\n## {title}\n"]
        if path == "load_from":
            out += ["The keys of a weights file to load from: `load_from` (a path, or these keys) for the whole task, "
                    "`init` on a model node for that network (see [Checkpoints](checkpoints.md)).\n"]
        out += ["| key | type and range | default | meaning |", "| --- | --- | --- | --- |"]
        section_defaults = defaults.get(path, {})
        for name, child in rule.fields.items():
            key = f"{path}.{name}"
            if key not in describe:
                undescribed.append(key.lstrip("."))
                continue
            used.add(key)
            default = REQUIRED if name in getattr(rule, "required", ()) else section_defaults.get(name, NONE)
            if path == "optim" and default is NONE and name in ("lr", "weight_decay", "momentum", "eps"):
                default = "the optimizer's"
            inner = subsection(child)
            text = describe[key]
            if inner is not None and inner is not rule:
                full = key.lstrip(".")
                if names_chosen_by_user(child):
                    full += ".<name>"
                if id(inner) in seen:
                    aliases.setdefault(seen[id(inner)], []).append(full)
                    text += f" (keys below, under `{seen[id(inner)]}`)"
                else:
                    seen[id(inner)] = full
                    queue.append((full, inner))
                    text += " (keys below)"
            out.append(f"| `{name}` | {cell(child.expects)} | {shown(default)} | {cell(text)} |")
        if path == "optim":
            out += optimizer_entry_rows(rule)
    if undescribed:
        raise SystemExit(f"keys without a meaning: {', '.join(undescribed)}: comment their defaults or add them "
                         "to DESCRIPTIONS in docs/gen_config_reference.py")
    unused = sorted(set(DESCRIPTIONS) - used)
    if unused:
        raise SystemExit(f"DESCRIPTIONS in docs/gen_config_reference.py names keys the schema lacks: {', '.join(unused)}")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the page differs from what would be written")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not PAGE.is_file() or PAGE.read_text() != text:
            print(f"{PAGE.relative_to(ROOT)} is stale: run python docs/gen_config_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
