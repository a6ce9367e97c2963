"""docs/gallery.md, written from docs/gallery/manifest.json (docs/make_gallery.py): a section per
kind of task, each image with a caption stating its columns, seed, commit and command."""

from __future__ import annotations

import json
from pathlib import Path

MANIFEST = "manifest.json"
SECTIONS = ["Segmentation", "Image-to-image translation", "Unconditional generation", "Semantic synthesis"]

# Shipped configs the script does not train, and why (measured 2026-11-28 on this 2-core machine).
LEFT_OUT = [
    ("configs/segmentation/deeplabv3_shapes.yaml",
     "4000 iterations of a ResNet-50 DeepLabV3: 1.16 CPU-seconds per iteration (tools/train.py, 25 against 5 "
     "iterations on one thread, measured beside a running comparison), so at least 38 minutes on two cores"),
    ("configs/segmentation/encoder_unet_resnet34_shapes.yaml, encoder_unet_mobilenet_v3_shapes.yaml, "
     "fpn_resnet50_shapes.yaml, deeplabv3plus_resnet50_shapes.yaml",
     "`encoder_weights: torchvision`: the ImageNet file must be in torch's hub cache, which this machine lacks; "
     "tools/train.py stops at start-up naming the file (nothing is downloaded)"),
    ("configs/segmentation/unet_voc.yaml, deeplabv3plus_r50_{voc_aug,cityscapes,ade20k}.yaml, "
     "configs/synthesis/{oasis,spade}_{cityscapes,ade20k}.yaml",
     "published datasets, downloaded by hand (Published datasets); 20000 to 80000 iterations"),
]
SYNTHESIS_LEFT_OUT = ("configs/synthesis/oasis_textures.yaml, spade_textures.yaml",
                      "about 13 minutes each on two cores ([Semantic synthesis](semantic-synthesis.md)), and hours for "
                      "a comparison of seeds: not trained by the script; `--synthesis-runs DIR` draws them from a "
                      "tools/compare.py comparison's runs")


def read_manifest(gallery: Path) -> dict:
    path = gallery / MANIFEST
    if path.is_file():
        return json.loads(path.read_text())
    return {"runs": {}, "images": [], "total": None}


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:.0f} s"


def columns_caption(entry: dict) -> str:
    kinds = {
        "prediction": "class colours blended over the image",
        "B -> A": "B is A's counterpart in the paired validation set, never seen paired in training",
        "draw 2": "two noise draws per label map",
        "real": "",
    }
    notes = [note for column, note in kinds.items() if column in entry["columns"] and note]
    return " | ".join(entry["columns"]) + (f" ({'; '.join(notes)})" if notes else "")


def caption(entry: dict) -> str:
    size = f"{entry['width']} x {entry['height']} px"
    if entry["kind"] == "comparison":
        made = ("its own plot" if entry["finished"] else
                "drawn by the gallery with its plot function (framework/comparison/plot.py) while it was still "
                "running, from the evaluations so far: " + "; ".join(
                    f"{name} " + ", ".join(f"seed {s} to iteration {last}" for s, last in seeds.items())
                    for name, seeds in entry["progress"].items()))
        return (f"`tools/compare.py` of {entry['config']}: {entry['metric']} against iterations, each seed a thin "
                f"line and the mean over the seeds a thick one; {made}. Runs in `{entry['source']}`, commit "
                f"{entry['commit']}: `{entry['command']}`. {size}.")
    if entry["kind"] == "samples":
        what = f"Validation samples, the first of data.val: {columns_caption(entry)}."
    else:
        metric = entry.get("metric")
        best = entry.get("best")
        what = ("Training curves: the losses at each log interval (TensorBoard) and "
                + (f"{metric} at each evaluation (metrics.jsonl), best {best[1]:.3f} at iteration {best[0]}."
                   if metric and best else "no evaluated metric (the config has none)."))
    trained = entry.get("train_seconds")
    run = (f"trained in {trained:.0f} s by `{entry['command']}`" if trained is not None
           else f"the run `{entry.get('source', '')}` of `{entry['command']}`, evaluated to iteration "
                f"{entry.get('progress')} when drawn")
    return f"{what} Seed {entry['seed']}, commit {entry['commit']}, {run}. {size}."


def timing(manifest: dict) -> str:
    total = manifest.get("total")
    if not total:
        return "The regeneration time is written here by the first full run of the script."
    conditions = (f"on the {total['cores']}-core CPU of this project's machine on {total['date']} "
                  f"(load average {total['load_before'][0]:.1f} when it started, {total['load_after'][0]:.1f} "
                  "when it ended)")
    drawn = manifest.get("synthesis_seconds")
    synthesis = ("and drew the synthesis runs" if total.get("with_synthesis") else
                 f"(the synthesis runs were drawn by a `--synthesis-only` command afterwards, in {drawn:.0f} s)"
                 if drawn is not None else "(no synthesis runs given)")
    note = f" {total['note']}" if total.get("note") else ""
    return (f"**Regeneration time**: `python docs/make_gallery.py` trained and drew the {total['configs']} "
            f"configs before the synthesis section {synthesis} in **{minutes(total['seconds'])}** (of which "
            f"tools/train.py {minutes(total['train_seconds'])}; {minutes(total['cpu_seconds'])} of CPU time over "
            f"all threads) {conditions}, "
            f"at commit {total['commit']}.{note} Each caption's training time comes from the same command.")


def write(docs: Path, manifest: dict, trained_order: list[str], synthesis_order: list[str]) -> Path:
    gallery = docs / "gallery"
    order = {name: i for i, name in enumerate(trained_order + synthesis_order)}
    images = sorted(manifest["images"], key=lambda e: (SECTIONS.index(e["section"]), order.get(e["name"], 99),
                                                       ["samples", "curves", "comparison"].index(e["kind"])))
    manifest["images"] = images
    (gallery / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    quick = any(e.get("quick") for e in images)
    lines = ["# Gallery", "",
             "What the shipped configs learn, drawn by `python docs/make_gallery.py` (see its docstring for the "
             "options) from runs it trains itself: every config that trains in minutes on a 2-core CPU, each with "
             "seed 0 through `tools/train.py` as a user would. A grid shows the config's first validation images "
             "through the Python API (`framework.load(run).predict / generate / translate`), at the data's own "
             "size enlarged by whole pixels; a curves figure shows what the run logged.", "",
             timing(manifest), ""]
    if quick:
        lines += ["**These pictures come from `--quick` runs of 2 iterations: a try-out, not results.**", ""]
    for section in SECTIONS:
        chosen = [e for e in images if e["section"] == section]
        if not chosen:
            continue
        lines += [f"## {section}", ""]
        for name in dict.fromkeys(e["name"] for e in chosen):
            mine = [e for e in chosen if e["name"] == name]
            first = mine[0]
            title = (f"`{first['config']}`: {first['about']}" if first["kind"] != "comparison"
                     else f"The comparison: {first['metric']} over seeds")
            lines += [f"### {title}", ""]
            for entry in mine:
                lines += [f"![{entry['kind']} of {name}]({Path(entry['file']).as_posix()})", "", caption(entry), ""]
    lines += ["## Shipped configs not in the gallery", "", "| config | why not |", "| --- | --- |"]
    drawn = any(e["section"] == "Semantic synthesis" for e in images)
    left_out = LEFT_OUT + [(SYNTHESIS_LEFT_OUT[0], SYNTHESIS_LEFT_OUT[1] + (
        " (above, named in the captions)" if drawn else "; none were given for these pictures"))]
    lines += [f"| `{config}` | {why} |" for config, why in left_out]
    path = docs / "gallery.md"
    path.write_text("\n".join(lines) + "\n")
    return path
