"""What the figures share: a matplotlib figure without pyplot's global state, and
labels and figure sizes measured in characters, so that long setting names never squeeze the axes.

matplotlib is imported when a figure is made, not with this module: the commands that import the
reports answer ``-h`` and report bad input without loading it."""
from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["new_figure", "wrap_label", "chars_in", "lines_height", "text_size"]


def new_figure(width: float, height: float) -> Figure:
    """A ``width`` x ``height`` inch figure with the constrained layout, drawn on its own Agg canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)  # the Agg canvas, without pyplot's global state
    return fig


def wrap_label(text: str, width: int = 26) -> str:
    """``text`` on lines of at most ``width`` characters (broken at spaces, commas, else anywhere):
    figure sizes are computed for labels of bounded width, so long setting names never
    squeeze the axes to nothing."""
    lines = textwrap.wrap(str(text), width, break_on_hyphens=False) or [str(text)]
    return "\n".join(lines)


def chars_in(inches: float, fontsize: float) -> int:
    """About how many characters of ``fontsize`` points fit in ``inches`` (0.6 em per character)."""
    return max(12, int(inches * 72 / (0.6 * fontsize)))


def lines_height(text: str, fontsize: float) -> float:
    """Inches taken by the lines of ``text`` at ``fontsize`` points (1.3 line spacing)."""
    return (text.count("\n") + 1) * 1.3 * fontsize / 72


def text_size(labels: list[str], fontsize: float) -> tuple[float, int]:
    """(inches of the longest line, most lines) of wrapped labels at ``fontsize`` points
    (about 0.6 em per character)."""
    lines = [line for label in labels for line in label.split("\n")] or [""]
    return max(len(x) for x in lines) * 0.6 * fontsize / 72, max(label.count("\n") + 1 for label in labels or [""])
