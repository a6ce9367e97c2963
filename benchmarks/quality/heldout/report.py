"""The protocol's report: per family, the judge's mIoU on the real val photos, and per generator
(config or plain script, EMA or live) its fakes' mIoU under that judge, x real, and the two
draws' diversity, mean ± sd over the seeds measured; as markdown and JSON. The held-out family
is a section of its own."""

import json
import statistics
from pathlib import Path


def mean_sd(values: list[float]) -> str:
    if not values:
        return "runs in progress"
    if len(values) == 1:
        return f"{values[0]:.3f} (1 seed)"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f} ({len(values)} seeds)"


def collect(work_dir: Path, families: list[str]) -> dict:
    """{family: {"real": mIoU or None, "rows": {generator: {"mIoU": [...], "ratio": [...], "diversity": [...],
    "seconds_per_iter": [...], "seeds": [...]}}}} from the result files present."""
    report = {}
    for family in families:
        results = work_dir / family / "results"
        judge = results / "judge.json"
        real = json.loads(judge.read_text())["mIoU_real"] if judge.is_file() else None
        rows: dict = {}
        for path in sorted(results.glob("*_seed*.json")) if results.is_dir() else []:
            name, seed = path.stem.rsplit("_seed", 1)
            data = json.loads(path.read_text())
            for kind in ("ema", "live"):
                if kind not in data:
                    continue
                row = rows.setdefault(f"{name} ({kind})", {"mIoU": [], "ratio": [], "diversity": [],
                                                           "seconds_per_iter": [], "seeds": []})
                row["mIoU"].append(data[kind]["mIoU"])
                row["ratio"].append(data[kind]["mIoU"] / real if real else None)
                row["diversity"].append(data[kind]["diversity"])
                row["seconds_per_iter"].append(data.get("seconds_per_iter"))
                row["seeds"].append(int(seed))
        report[family] = {"real": real, "rows": rows}
    return report


def family_table(name: str, entry: dict) -> list[str]:
    real = entry["real"]
    lines = [f"judge mIoU on the real val photos: {real:.3f}" if real is not None else "judge: runs in progress", "",
             "| generator | mIoU of the fakes | x real | two draws' mean abs difference | seeds |",
             "| --- | --- | --- | --- | --- |"]
    for generator, row in sorted(entry["rows"].items()):
        ratios = [r for r in row["ratio"] if r is not None]
        lines.append(f"| {generator} | {mean_sd(row['mIoU'])} | {mean_sd(ratios)} | {mean_sd(row['diversity'])} "
                     f"| {', '.join(map(str, row['seeds']))} |")
    if not entry["rows"]:
        lines.append("| runs in progress | | | | |")
    return lines


def write_report(work_dir: Path, families: list[str], held_out: str, settings: dict) -> tuple[Path, Path]:
    report = collect(work_dir, families)
    lines = ["# Held-out semantic-synthesis protocol", "",
             f"Settings: {json.dumps(settings)}", ""]
    for family in families:
        title = f"## {family}" + (" (held out: never used for tuning)" if family == held_out else "")
        lines += [title, "", *family_table(family, report[family]), ""]
    markdown, data = work_dir / "report.md", work_dir / "report.json"
    markdown.write_text("\n".join(lines))
    data.write_text(json.dumps({"settings": settings, "held_out": held_out, "families": report}, indent=1) + "\n")
    return markdown, data
