"""Roofline plots (matplotlib, imported lazily): every kernel as a point under the roofline."""

from __future__ import annotations

import math
from pathlib import Path

from irbridge.analysis.driver import Run
from irbridge.errors import IrbridgeError

_SUFFIXES = (".png", ".svg")


def plot_paths(path: Path) -> list[Path]:
    """`roofline.png` -> roofline.png and roofline.svg (both formats are always written)."""
    if path.suffix.lower() not in (*_SUFFIXES, ""):
        raise IrbridgeError(f"--plot {path}: use a .png or .svg name (both are written)")
    return [path.with_suffix(s) for s in _SUFFIXES]


def roofline_plot(run: Run, path: Path, title: str = "") -> list[Path]:
    """One panel per target of the run: the roofline min(peak, AI x bandwidth) on log-log
    axes and every kernel at (arithmetic intensity, attained FLOP/s), coloured by kind."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import NullFormatter
    except ImportError as exc:  # pragma: no cover - matplotlib ships with the dependencies
        raise IrbridgeError("--plot needs matplotlib", hint="pip install matplotlib") from exc
    paths = plot_paths(path)
    if not paths[0].parent.is_dir():
        raise IrbridgeError(f"--plot {path}: folder {paths[0].parent} does not exist")
    count = len(run.mappings)
    fig, axes = plt.subplots(1, count, figsize=(6.0 * count, 4.8), squeeze=False)
    kinds = sorted({r.partition.kind for m in run.mappings for r in m.estimates
                    if not r.partition.free})
    cmap = plt.get_cmap("tab10" if len(kinds) <= 10 else "tab20")
    colors = {kind: cmap(i % cmap.N) for i, kind in enumerate(kinds)}
    for ax, mapping in zip(axes[0], run.mappings, strict=True):
        points = [r for r in mapping.estimates if not r.partition.free
                  and r.latency_seconds > 0 and r.partition.cost.flops > 0
                  and r.partition.external_bytes > 0]
        peak, bandwidth = mapping.peak, mapping.bandwidth
        ridge = peak / bandwidth
        intensities = [r.intensity for r in points] or [ridge]
        lo = min(min(intensities), ridge) / 4
        hi = max(max(intensities), ridge) * 4
        xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
        ax.plot(xs, [min(peak, x * bandwidth) for x in xs], color="black", linewidth=1.5,
                label=f"roofline ({mapping.dtype})")
        ax.axvline(ridge, color="grey", linestyle=":", linewidth=1)
        for kind in kinds:
            chosen = [r for r in points if r.partition.kind == kind]
            if chosen:
                ax.scatter([r.intensity for r in chosen],
                           [r.partition.cost.flops / r.latency_seconds for r in chosen],
                           s=[12 + 60 * math.sqrt(r.latency_seconds / max(
                               p.latency_seconds for p in points)) for r in chosen],
                           color=colors[kind], alpha=0.75, label=kind, edgecolors="none")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        rates = [r.partition.cost.flops / r.latency_seconds for r in points]
        ax.set_ylim(min([*rates, peak / 10]) / 3, peak * 2)
        ax.set_xlabel("arithmetic intensity (FLOPs / external byte)")
        ax.set_ylabel("attained FLOP/s")
        ax.set_title(f"{mapping.target.name}, {mapping.strategy}: ridge {ridge:.0f} FLOP/B",
                     fontsize=10)
        ax.grid(True, which="major", linewidth=0.4, alpha=0.5)
        ax.legend(fontsize=7, loc="lower right")
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    for p in paths:
        fig.savefig(p, dpi=120)
    plt.close(fig)
    return paths
