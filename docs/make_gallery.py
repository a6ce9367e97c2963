"""Regenerate the docs' gallery (docs/gallery.md and docs/gallery/): train every shipped config that
trains in minutes on a CPU, then draw its validation samples and training curves.

    python docs/make_gallery.py --synthesis-runs /path/to/work_dirs/compare_synthesis3
    python docs/make_gallery.py --quick --docs /tmp/gallery_try     # 2 iterations a run: a try-out
    python docs/make_gallery.py --redraw --synthesis-runs DIR       # draw again from the runs, no training

Each config is an ordinary `tools/train.py` run (seed 0) in <work-dir>/<name>; its time and the
whole command's are measured and written into the page. The two synthesis configs take about 13
minutes each on two cores, and their `tools/compare.py` comparison hours: the gallery draws them
from an existing comparison's work dir (--synthesis-runs: <config>/seed<S>/ runs and its
curves_*.png), naming the runs and the commit of the checkout they sit in. The page, captions and
sizes are written from docs/gallery/manifest.json, which keeps the figures of anything not
redrawn this time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ beside the docs: mkdocs would copy it into the site
REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "docs")]

import gallery_draw  # noqa: E402  (after the path: the docs folder is no package)
import gallery_page  # noqa: E402

# (name, config, section, what the config is) in page order. Shipped configs left out, and why,
# are in gallery_page.LEFT_OUT (measured; see the page).
TRAINED = [
    ("unet_shapes", "configs/segmentation/unet_shapes.yaml", "Segmentation", "the Quickstart: a small UNet on synthetic shapes"),
    ("unet_textures", "configs/segmentation/unet_textures.yaml", "Segmentation",
     "a UNet on the synthetic textures (the synthesis configs' segmenter score is this model's)"),
    ("tiny_fcn_shapes", "projects/example_custom/configs/tiny_fcn_shapes.yaml", "Segmentation",
     "a user's own network and loss (Extending)"),
    ("pix2pix_shapes", "projects/pix2pix/configs/pix2pix_shapes.yaml", "Image-to-image translation",
     "pix2pix: a UNet generator and a PatchGAN"),
    ("pix2pixhd_shapes", "projects/pix2pix/configs/pix2pixhd_shapes.yaml", "Image-to-image translation",
     "pix2pixHD-style: multi-scale discriminator, feature matching, perceptual loss"),
    ("global_local_gan_pairs", "projects/example_custom/configs/global_local_gan_pairs.yaml", "Image-to-image translation",
     "a user's own GAN task with a global and a local discriminator (Extending)"),
    ("cyclegan_shapes", "projects/cyclegan/configs/cyclegan_shapes.yaml", "Image-to-image translation",
     "CycleGAN on unpaired images of two styles"),
    ("cyclegan_shapes_toolkit", "projects/cyclegan/configs/cyclegan_shapes_toolkit.yaml", "Image-to-image translation",
     "CycleGAN with the GAN toolkit: multi-scale spectral-norm discriminators, R1, adaptive DiffAugment"),
    ("dcgan_shapes", "projects/dcgan/configs/dcgan_shapes.yaml", "Unconditional generation", "DCGAN on shape images"),
    ("dcgan_small_data", "projects/dcgan/configs/dcgan_small_data.yaml", "Unconditional generation",
     "DCGAN for 300 images: hinge loss, spectral norm, adaptive DiffAugment"),
]
SYNTHESIS = [
    ("oasis_textures", "configs/synthesis/oasis_textures.yaml", "OASIS-style: a segmenter discriminator, LabelMix"),
    ("spade_textures", "configs/synthesis/spade_textures.yaml", "SPADE-style: multi-scale discriminator, feature matching"),
]
COMPARED = ["mIoU_fake", "Diversity"]  # of the comparison's curves_<metric>.png
SEED = 0
QUICK = ["train.max_iters=2", "train.val_interval=2", "train.ckpt_interval=2", "train.log_interval=1"]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", default=str(REPO / "docs"), help="writes DOCS/gallery.md and DOCS/gallery/")
    parser.add_argument("--work-dir", default="work_dirs/gallery", help="the training runs go to WORK_DIR/<name>")
    parser.add_argument("--synthesis-runs", help="a tools/compare.py work dir of the synthesis configs")
    parser.add_argument("--synthesis-seed", type=int, default=SEED, help="which seed's run to draw (default 0)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="these configs only (the rest of the page is kept)")
    parser.add_argument("--synthesis-only", action="store_true",
                        help="draw the --synthesis-runs only (when the comparison ends after the training)")
    parser.add_argument("--redraw", action="store_true", help="draw from the runs in WORK_DIR without training")
    parser.add_argument("--quick", action="store_true", help="2 iterations a run: to try the script, never to publish")
    parser.add_argument("--note", default="", help="a sentence on the conditions of the timing, put into the page")
    return parser.parse_args(argv)


def git(*args, cwd=REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def commit_of(folder: Path) -> str:
    """The checkout's HEAD, "+ local changes" when its tracked code differs from it."""
    try:
        head = git("rev-parse", "--short", "HEAD", cwd=folder)
    except subprocess.CalledProcessError:
        return "unknown (the runs are in no git checkout)"
    changed = git("status", "--porcelain", "--untracked-files=no", "--", "framework", "projects", "configs", "tools",
                  cwd=git("rev-parse", "--show-toplevel", cwd=folder))
    return head + (" + local changes" if changed else "")


def train(config: str, run_dir: Path, quick: bool) -> tuple[list[str], float]:
    """tools/train.py on `config` into `run_dir` (a fresh run): (the command as shown, seconds)."""
    shown = ["python", "tools/train.py", "--config", config, "--work-dir", str(run_dir), f"seed={SEED}",
             *(QUICK if quick else [])]
    start = time.perf_counter()
    result = subprocess.run([sys.executable, *shown[1:], "--overwrite"], cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"{config}: tools/train.py failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
    return shown, seconds


def image_entry(path: Path, docs: Path, **fields) -> dict:
    from PIL import Image

    with Image.open(path) as image:
        width, height = image.size
    return {"file": str(path.relative_to(docs)), "width": width, "height": height, **fields}


def draw_run(name: str, run_dir: Path, gallery: Path, docs: Path, seed: int, common: dict) -> list[dict]:
    """The sample grid and the curves of one run, as manifest entries."""
    samples, columns = gallery_draw.draw_samples(run_dir, gallery / f"{name}_samples", seed=seed)
    curves, metric, best = gallery_draw.draw_curves(run_dir, gallery / f"{name}_curves")
    return [image_entry(samples, docs, kind="samples", columns=columns, **common),
            image_entry(curves, docs, kind="curves", metric=metric, best=best, **common)]


def last_evaluation(run_dir: Path) -> int | None:
    """The iteration of a run's last metrics.jsonl record (None: not evaluated yet)."""
    path = run_dir / "metrics.jsonl"
    records = path.read_text().splitlines() if path.is_file() else []
    return json.loads(records[-1])["iter"] if records else None


def started_by(run_dir: Path) -> str:
    """The tools/train.py command of a comparison's run, from the first line of its log
    (`== start: <python> <repo>/tools/train.py ...`), with the paths of that machine shortened."""
    first = (run_dir.parent / f"{run_dir.name}.log").read_text().splitlines()[:3]
    line = next(text for text in first if text.startswith("== start: ")).removeprefix("== start: ").split()
    return " ".join(["python", "tools/train.py", *line[2:]])


def comparison_plot(runs: Path, metric: str, stem: Path) -> tuple[Path, dict[str, dict[int, int | None]], bool]:
    """The comparison's curves_<metric>.png; while it still runs (no plot yet), the same plot drawn
    by its own function from the metrics.jsonl of the runs there so far. (file, {config: {seed: its
    last evaluated iteration}}, whether the comparison's own plot was taken)."""
    from framework.comparison.plot import plot_curves
    from framework.comparison.summary import read_curves

    progress = {name: {int(run.name.removeprefix("seed")): last_evaluation(run)
                       for run in sorted((runs / name).glob("seed*")) if run.is_dir()} for name, _, _ in SYNTHESIS}
    plot = runs / f"curves_{metric}.png"
    if plot.is_file():
        import cv2

        return gallery_draw.save_image(cv2.cvtColor(cv2.imread(str(plot)), cv2.COLOR_BGR2RGB), stem), progress, True
    curves = {name: [read_curves(runs / name / f"seed{seed}" / "metrics.jsonl", [metric])[metric]
                     for seed, last in seeds.items() if last is not None] for name, seeds in progress.items()}
    path = plot_curves(metric, "max", curves, stem.with_suffix(".png"))
    if path.stat().st_size > gallery_draw.MAX_BYTES:
        sys.exit(f"{path}: over {gallery_draw.MAX_BYTES} bytes")
    return path, progress, False


def synthesis_entries(runs: Path, seed: int, gallery: Path, docs: Path, quick: bool) -> list[dict]:
    """The synthesis runs of a comparison's work dir: each config's grid and curves, and the
    comparison's own plots (or, while it runs, the same plots of the runs so far)."""
    commit = commit_of(runs)
    command = "python tools/compare.py --configs " + " ".join(c for _, c, _ in SYNTHESIS)
    entries = []
    for name, config, about in SYNTHESIS:
        run_dir = runs / name / f"seed{seed}"
        max_iters = gallery_draw.run_config(run_dir)["train"]["max_iters"]
        common = {"name": name, "config": config, "about": about, "seed": seed, "commit": commit, "quick": quick,
                  "command": started_by(run_dir), "section": "Semantic synthesis", "source": str(run_dir),
                  "progress": f"{last_evaluation(run_dir)} of {max_iters}"}
        entries += draw_run(name, run_dir, gallery, docs, seed, common)
    for metric in COMPARED:
        path, progress, finished = comparison_plot(runs, metric, gallery / f"compare_synthesis_{metric}")
        seeds = sorted({s for by_seed in progress.values() for s in by_seed})
        entries.append(image_entry(path, docs, kind="comparison", name=f"compare_{metric}", metric=metric, seeds=seeds,
                                   commit=commit, command=f"{command} --seeds {' '.join(map(str, seeds))}",
                                   section="Semantic synthesis", source=str(runs), quick=quick, finished=finished,
                                   progress=progress, config=" and ".join(c for _, c, _ in SYNTHESIS)))
    return entries


def write_page(docs: Path, manifest: dict) -> None:
    gallery_page.write(docs, manifest, [name for name, *_ in TRAINED], [name for name, *_ in SYNTHESIS])


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (the training runs), every thread:
    beside other work the wall time grows, this far less."""
    used = os.times()
    return used.user + used.system + used.children_user + used.children_system


def main(argv=None) -> int:
    args = parse_args(argv)
    docs = Path(args.docs).resolve()
    os.chdir(REPO)  # the runs' paths and the commands in the captions are relative to the repository
    gallery = docs / "gallery"
    gallery.mkdir(parents=True, exist_ok=True)
    work_dir = Path(args.work_dir)
    manifest = gallery_page.read_manifest(gallery)
    names = [name for name, *_ in TRAINED]
    unknown = set(args.only or ()) - set(names)
    if unknown:
        sys.exit(f"--only: no gallery config {', '.join(sorted(unknown))}; choose from {', '.join(names)}")
    wanted = [] if args.synthesis_only else [entry for entry in TRAINED if not args.only or entry[0] in args.only]
    if args.synthesis_only and not args.synthesis_runs:
        sys.exit("--synthesis-only needs --synthesis-runs DIR")
    start, load_before, cpu_before = time.perf_counter(), os.getloadavg(), cpu_seconds()
    commit = commit_of(REPO)
    for name, config, section, about in wanted:
        run_dir = work_dir / name
        previous = manifest["runs"].get(name, {})
        if args.redraw:
            shown, seconds = previous.get("command", "").split(), previous.get("train_seconds")
        else:
            shown, seconds = train(config, run_dir, args.quick)
            print(f"{name}: trained in {seconds:.0f} s", flush=True)
        common = {"name": name, "config": config, "about": about, "section": section, "seed": SEED,
                  "commit": previous.get("commit", commit) if args.redraw else commit, "command": " ".join(shown),
                  "train_seconds": seconds, "quick": args.quick}
        manifest["runs"][name] = {key: common[key] for key in ("command", "train_seconds", "commit")}
        manifest["images"] = [e for e in manifest["images"] if e.get("name") != name]
        manifest["images"] += draw_run(name, run_dir, gallery, docs, SEED, common)
        write_page(docs, manifest)  # after each run: a command stopped half-way leaves a page of what it drew
    if args.synthesis_runs:
        begun = time.perf_counter()
        found = synthesis_entries(Path(args.synthesis_runs).resolve(), args.synthesis_seed, gallery, docs, args.quick)
        drawn = {e["name"] for e in found}
        manifest["images"] = [e for e in manifest["images"] if e.get("name") not in drawn] + found
        manifest["synthesis_seconds"] = time.perf_counter() - begun
    if not (args.redraw or args.only or args.synthesis_only):  # a whole regeneration: its time is the page's figure
        manifest["total"] = {"seconds": time.perf_counter() - start, "cpu_seconds": cpu_seconds() - cpu_before,
                             "load_before": load_before,
                             "load_after": os.getloadavg(), "date": datetime.date.today().isoformat(),
                             "cores": os.cpu_count(), "note": args.note, "commit": commit, "quick": args.quick,
                             "configs": len(wanted), "with_synthesis": bool(args.synthesis_runs),
                             "train_seconds": sum(manifest["runs"][name]["train_seconds"] for name, *_ in wanted)}
    write_page(docs, manifest)
    print(f"written: {docs / 'gallery.md'} and {len(manifest['images'])} images in {gallery}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
