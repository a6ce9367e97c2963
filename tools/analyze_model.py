"""Parameters and FLOPs of a config's networks, per module, at an input size:

    python tools/analyze_model.py --config CFG [--checkpoint CKPT] [--size H W] [--depth 2]
        [--json FILE] [key=value ...]

FLOPs come from torch's own counter (torch.utils.flop_counter; a multiply-add is 2 FLOPs) for
one image of --size (rounded up to the network's size divisor); a GAN shows its generator and
discriminator. The checkpoint is optional: counts do not depend on the weights.
"""

import argparse
import json
import sys
from pathlib import Path

from framework.analysis.model_stats import human, module_rows
from framework.config.rules import integer
from framework.engine.trained import load_trained_task
from framework.runtime.cli import MAX_DEPTH, MAX_SIDE, check_options, given_path, output_file, run
from framework.runtime.overwrite import refuse_writing_over_inputs


def parse_args() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, type=given_path, help="YAML config file")
    parser.add_argument("--checkpoint", type=given_path, help="training checkpoint (optional)")
    parser.add_argument("--size", type=int, nargs=2, default=[256, 256], metavar=("H", "W"), help="input size")
    parser.add_argument("--depth", type=int, default=2, help="module nesting levels to list")
    parser.add_argument("--json", type=output_file, help="also write the table as JSON here")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    return parser


def format_rows(rows: list[dict]) -> str:
    width = max(len("module"), *(len(r["module"]) for r in rows))
    lines = [f"{'module':<{width}}  {'params':>10}  {'trainable':>10}  {'FLOPs':>10}"]
    lines += [f"{r['module']:<{width}}  {human(r['params']):>10}  {human(r['trainable']):>10}  {human(r['flops']):>10}"
              for r in rows]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> None:
    check_options({"--size": (args.size, integer(1, max=MAX_SIDE)), "--depth": (args.depth, integer(0, max=MAX_DEPTH))})
    if args.json:
        reads = [("--config", args.config), *([("--checkpoint", args.checkpoint)] if args.checkpoint else [])]
        refuse_writing_over_inputs("--json", args.json, reads, [args.json], output_is_folder=False)
    task, _ = load_trained_task(args.config, args.checkpoint, args.overrides)
    report = {}
    for name, (network, inputs) in task.network_examples(*args.size).items():
        rows = module_rows(network, inputs, args.depth)
        shapes = [list(tensor.shape) for tensor in inputs]
        report[name] = {"input": shapes[0], "inputs": shapes, "modules": rows}
        print(f"{name}: input {' + '.join(str(tuple(shape)) for shape in shapes)}, {human(rows[0]['params'])} parameters, "
              f"{human(rows[0]['flops'])} FLOPs")
        print(format_rows(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(run(main, parse_args()))
