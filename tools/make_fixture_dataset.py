"""Write a small fake tree in a published dataset's layout, to try a config before downloading:

    python tools/make_fixture_dataset.py --layout cityscapes|ade20k|cocostuff|voc_sbd|facades|horse2zebra OUT
        [--samples N] [--seed S] [--train-ids]

The files have the published names and encodings (Cityscapes' labelIds, 16-bit instanceIds and
colour PNGs; ADE20K's 0..150 maps; COCO-Stuff's 0..181/255 maps; VOC's palette PNGs and SBD's
.mat class maps; pix2pix's facades as A|B pairs side by side; CycleGAN's horse2zebra trainA/trainB/
testA/testB), random images, and label maps that walk through every stored value. It prints the
command training a shipped config that reads the layout on the tree (its root overrides), e.g.

    python tools/make_fixture_dataset.py --layout cityscapes /tmp/cityscapes_fake
    python tools/train.py --config configs/segmentation/deeplabv3plus_r50_cityscapes.yaml \\
        data.train.dataset.root=/tmp/cityscapes_fake task.model.encoder_weights=null train.max_iters=2

and, last, the folder the tree's root is (voc_sbd: the folder holding VOCdevkit/ and benchmark_RELEASE/;
its overrides name both roots).
"""

import argparse
import sys

from framework.config.rules import integer
from framework.config.schema import SEED_MAX
from framework.data.published.fixture_trees import (
    CONFIG_OF,
    LAYOUTS,
    SMOKE_OVERRIDES,
    root_overrides,
    write_fixture_tree,
)
from framework.runtime.cli import check_options, output_folder, run

# A fixture tries a config before the download: a few samples do. 100000000 wrote 5.1 GB before it
# was stopped, with no end in sight (issue 63); 1000 took 13-21 s and 12-72 MB per layout on a shared
# 2-core machine.
MAX_SAMPLES = 1000


def parse_args() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layout", required=True, choices=LAYOUTS, help="which published layout")
    parser.add_argument("out", type=output_folder, help="folder to write the tree into: new, empty, or a fixture "
                        "tree it wrote (a folder holding any other file is refused)")
    parser.add_argument("--samples", type=int, default=3, help=f"samples per split, at most {MAX_SAMPLES} (voc_sbd: fixed names)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random images")
    parser.add_argument("--train-ids", action="store_true",
                        help="also write the converters' *_labelTrainIds.png (cityscapes, cocostuff)")
    return parser


def main(args: argparse.Namespace) -> None:
    check_options({"--samples": (args.samples, integer(1, max=MAX_SAMPLES)),
                   "--seed": (args.seed, integer(0, max=SEED_MAX))})
    root = write_fixture_tree(args.layout, args.out, samples=args.samples, seed=args.seed, train_ids=args.train_ids)
    overrides = " ".join(root_overrides(args.layout, root))
    if args.layout in CONFIG_OF:
        command = ["python tools/train.py --config", CONFIG_OF[args.layout], overrides,
                   *filter(None, [SMOKE_OVERRIDES.get(args.layout)]), "train.max_iters=2"]
        print(f"wrote a {args.layout} fixture tree; train on it with:\n  " + " ".join(command))
    else:
        print(f"wrote a {args.layout} fixture tree; no shipped config reads it: set {overrides} in yours")
    print(root)


if __name__ == "__main__":
    sys.exit(run(main, parse_args()))
