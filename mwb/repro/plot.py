"""The picture of a reproduction (matplotlib, Agg backend: files only, no display).

Seeded experiments: one panel per metric, each condition's mean over seeds with a 95% t-interval over seeds
(mean ± t₀.₉₇₅,ₙ₋₁ · s/√n; no bar with one seed) and the paper's value, where it prints one, as a
red cross.
Deterministic experiments: ours / paper for every paper value, with the declared tolerance as a band, so
agreement across numbers of very different size (billions of parameters, kilobytes) reads on one axis.
"""
from __future__ import annotations

import math

from scipy import stats as st

from .analysis import mean_std


def t_interval(values: list[float]) -> float:
    """Half-width of the 95% t-interval of the mean of ``values`` (0 for fewer than two)."""
    n = len(values)
    if n < 2:
        return 0.0
    return float(st.t.ppf(0.975, n - 1)) * mean_std(values)[1] / math.sqrt(n)


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_results(results: dict, path: str) -> str:
    plt = _pyplot()
    if results["deterministic"]:
        fig = _ratio_plot(plt, results)
    else:
        fig = _metric_panels(plt, results)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _metric_panels(plt, results: dict):
    conds = results["conditions"]
    metrics = [m for m in results["metrics"] if any(m in row for row in conds.values())]
    paper = {(pv["condition"], pv["metric"]): pv["value"] for pv in results["paper_values"]}
    fig, axes = plt.subplots(1, len(metrics), figsize=(max(4.0, 1.2 * len(conds)) * len(metrics), 3.6),
                             squeeze=False)
    for ax, m in zip(axes[0], metrics):
        names = [c for c, row in conds.items() if m in row]
        means = [mean_std(conds[c][m])[0] for c in names]
        errs = [t_interval(conds[c][m]) for c in names]
        ax.bar(range(len(names)), means, yerr=errs, capsize=4, color="#4c72b0", alpha=0.85,
               label=f"mean over {len(results['seeds'])} seed(s), 95% t-interval")
        px = [(i, paper[(c, m)]) for i, c in enumerate(names) if (c, m) in paper]
        if px:
            ax.scatter([i for i, _ in px], [v for _, v in px], marker="x", color="#c44e52", s=60, zorder=3,
                       label="paper")
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
        ax.set_title(m)
        ax.legend(fontsize=7)
    fig.suptitle(f"{results['experiment']} ({results['scale']} scale): verdict {results['verdict']}", fontsize=10)
    return fig


def _ratio_plot(plt, results: dict):
    rows = [r for r in results["comparisons"] if r.get("ratio") is not None]
    fig, ax = plt.subplots(figsize=(7.5, 0.28 * max(len(rows), 4) + 1.2))
    for i, r in enumerate(rows):
        band = r["allowed"] / abs(r["paper"]) if r.get("allowed") is not None and r["paper"] else None
        if band is not None:
            ax.plot([1 - band, 1 + band], [i, i], color="#bbbbbb", linewidth=6, solid_capstyle="butt", zorder=1)
        ax.scatter([r["ratio"]], [i], color="#55a868" if r["within"] else "#c44e52", zorder=2,
                   marker="o" if r["headline"] else "s")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{r['b']}: {r['metric']}" for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ours / paper\ngrey: declared tolerance; green: within, red: outside; squares: not in the verdict",
                  fontsize=8)
    ax.set_title(f"{results['experiment']} ({results['scale']} scale): verdict {results['verdict']}", fontsize=10)
    return fig
