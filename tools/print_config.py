"""Print the resolved config: bases merged, overrides applied, interpolations resolved, defaults
filled in (what a run would use, and what it saves as <work_dir>/config.yaml).

    python tools/print_config.py --config CFG [--output FILE] [key=value ...]
"""

import argparse
import sys

from omegaconf import OmegaConf

from framework.config import load_config, save_config
from framework.runtime.cli import given_path, output_file, run
from framework.runtime.overwrite import refuse_writing_over_inputs


def parse_args() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, type=given_path, help="YAML config file")
    parser.add_argument("--output", type=output_file, help="also write it to this file")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    return parser


def main(args: argparse.Namespace) -> None:
    if args.output:  # the resolved copy would replace the config it was read from
        refuse_writing_over_inputs("--output", args.output, [("--config", args.config)], [args.output], False)
    cfg = load_config(args.config, args.overrides)
    print(OmegaConf.to_yaml(cfg, resolve=True), end="")
    if args.output:
        save_config(cfg, args.output)


if __name__ == "__main__":
    sys.exit(run(main, parse_args()))
