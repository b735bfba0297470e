"""One run's gate map, the picture training logs to W&B each epoch and the gate report draws per
run: what both share (heads kept per layer, the layer x head axes), below both. The kept cut-off itself is
:data:`mtl_heads.model.gate_constants.KEPT_AT`."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mtl_heads.model.gate_constants import KEPT_AT
from mtl_heads.figures.plots import chars_in, lines_height, new_figure, wrap_label

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["kept_per_layer", "grid_axes", "save_figure", "plot_gate_map"]


def kept_per_layer(gates: np.ndarray | list[np.ndarray], threshold: float = KEPT_AT) -> np.ndarray:
    """Heads kept per layer: ``[layers]`` for one run ``[layers, heads]``, ``[runs, layers]`` for a list.

    Args:
        gates: gate values; a head is kept when its gate is >= ``threshold``.
        threshold: default :data:`mtl_heads.model.gate_constants.KEPT_AT`.
    """
    return (np.asarray(gates, dtype=float) >= threshold).sum(-1)


def grid_axes(ax, layers: int, heads: int) -> None:
    ax.set_xticks(range(heads))
    ax.set_yticks(range(layers))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")


def save_figure(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=120)
    return path


def plot_gate_map(values: np.ndarray, title: str, path: Path, threshold: float = KEPT_AT) -> Path:
    """Layer x head heatmap of one run's gates (black = open), pruned heads marked x, kept count in the title."""
    layers, heads = values.shape
    kept = kept_per_layer(values, threshold)  # [layers]
    width = max(3.6, 0.45 * heads + 2.2)
    title = wrap_label(f"{title}: {int(kept.sum())}/{values.size} heads kept", chars_in(width - 0.4, 9))
    fig = new_figure(width, 0.45 * layers + 1.1 + lines_height(title, 9))
    ax = fig.add_subplot()
    image = ax.imshow(values, cmap="gray_r", vmin=0.0, vmax=1.0, interpolation="nearest")
    for layer, head in zip(*np.nonzero(values < threshold)):
        ax.text(head, layer, "x", ha="center", va="center", color="tab:red", fontsize=8)
    grid_axes(ax, layers, heads)
    ax.set_yticklabels([f"{layer} ({k})" for layer, k in enumerate(kept)])
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax, label="gate", shrink=0.8)
    return save_figure(fig, path)
