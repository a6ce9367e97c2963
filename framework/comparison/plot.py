"""One PNG per metric: its curve over the iterations for each config, every seed a thin line and
the mean over the seeds a thick one, in the config's colour (`CONFIG_COLOURS`, in order).

matplotlib's object interface (Figure + the Agg canvas), never pyplot: no display and no global
figure state, so it runs on a headless machine and inside a test process alike.
"""

from __future__ import annotations

import re
from pathlib import Path

from framework.comparison.summary import Curve

# matplotlib's tab10, written out so the picture's colours are fixed (tests look for them)
CONFIG_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                  "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


def plot_file_name(metric: str) -> str:
    return "curves_" + re.sub(r"[^\w.-]", "_", metric) + ".png"


def mean_curve(curves: list[Curve]) -> Curve:
    """The mean over the seeds at the iterations every seed evaluated."""
    common = set.intersection(*(set(i for i, _ in curve) for curve in curves)) if curves else set()
    by_iter = [dict(curve) for curve in curves]
    return [(i, sum(values[i] for values in by_iter) / len(by_iter)) for i in sorted(common)]


def plot_curves(metric: str, direction: str, curves_by_config: dict[str, list[Curve]], path: Path) -> Path:
    """`curves_by_config`: {config name: [one curve per seed]} in the report's order."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4.5), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for i, (name, curves) in enumerate(curves_by_config.items()):
        colour = CONFIG_COLOURS[i % len(CONFIG_COLOURS)]
        for curve in curves:
            axes.plot(*zip(*curve), color=colour, linewidth=0.8, alpha=0.45)
        mean = mean_curve(curves)
        if mean:
            axes.plot(*zip(*mean), color=colour, linewidth=3, label=f"{name} (mean of {len(curves)})")
    axes.set_xlabel("iteration")
    axes.set_ylabel(f"{metric} ({'higher' if direction == 'max' else 'lower'} is better)")
    axes.grid(alpha=0.3)
    if axes.get_legend_handles_labels()[0]:
        axes.legend()
    figure.tight_layout()
    figure.savefig(path, format="png", metadata={"Software": None})  # no version stamp: same runs, same bytes
    return path
