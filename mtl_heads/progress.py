"""Progress of a long loop: a tqdm bar on a terminal, plain lines in a log.

tqdm redraws its bar with carriage returns. On a terminal that is one line that moves; sent to a
file (``python -m mtl_heads.train ... > train.log 2>&1``) every redraw stays, and a four-minute run
leaves over a thousand ``\\r`` frames in the log. :func:`progress_bar` therefore gives a tqdm bar only
when the bars' stream (stderr) is a terminal (or in a Jupyter kernel, where tqdm draws a widget),
and otherwise a :class:`PlainProgress`: the same ``update`` / ``set_postfix`` / ``write`` / ``close``
interface (and iteration, ``with``), writing whole lines with the numbers the bar would show::

    epoch 2/5:  40% 30/75 [00:31<00:46,  0.96it/s, loss=1.337, task=ner]

When a line is written (the rule, and why; :class:`Display` holds its numbers): one each time the count
passes another tenth of the total (``every=0.1``), but no sooner than ``interval`` seconds (default 30)
after the previous line.
A long loop (an EWT epoch on a CPU: hours) thus logs about ten lines, one per 10%, and a short one
(a dev pass of a second or two) none until it ends, so a log holds a few lines per epoch rather
than a frame per step. A loop without a total (a download of unknown size) writes one line per
``interval``. At the end, ``close`` writes the last line (the totals, the time) when ``summary`` is
true (the training loop's per-epoch line), or else when the loop was long enough to write a line
before or lasted ``interval`` seconds: a finished loop that took a while is always on record.

:func:`write` prints a message between bars (``tqdm.write`` on a terminal, so that a live bar is
redrawn below it; a plain flushed line otherwise); :func:`hf_bars_off_in_logs` keeps transformers' own bars
(loading weights) out of logs. This module imports nothing of the project.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Self

from tqdm.auto import tqdm

__all__ = ["EVERY", "INTERVAL", "BYTES", "Unit", "Display", "PlainProgress", "hf_bars_off_in_logs", "is_terminal",
           "progress_bar", "uses_bars", "write"]

EVERY = 0.1        # a plain line each time another tenth of the total is done ...
INTERVAL = 30.0    # ... at most one per 30 seconds (with no total: one per 30 seconds)


@dataclass(frozen=True)
class Unit:
    """What a loop counts, and how its counts are written (tqdm's ``unit``, ``unit_scale`` and ``unit_divisor``)."""

    name: str = "it"
    """What is counted: ``it`` (default), ``sent``, ``batch``, ``B``."""
    scale: bool = False
    """Counts with a k / M / G prefix (``30.0MB``; tqdm's ``unit_scale``). Default False: whole counts."""
    divisor: int = 1000
    """The prefixes' step (tqdm's ``unit_divisor``): 1000 (default), or 1024 for bytes."""


BYTES = Unit("B", scale=True, divisor=1024)
"""Bytes, written ``30.0MB`` (a download)."""


@dataclass(frozen=True)
class Display:
    """How progress shows over time and when the loop ends: in a log, when a plain line is written (the rule of
    the module's docstring) and whether the closing line always is; on a terminal, whether the finished bar stays."""

    every: float = EVERY
    """Plain lines: a line each time the count passes another ``every`` of the total, a fraction in (0, 1]
    (default 0.1)."""
    interval: float = INTERVAL
    """Plain lines: at most one line per ``interval`` seconds; with no total, one per ``interval`` (default 30)."""
    summary: bool = False
    """Plain lines: always write the closing line (the training loop's per-epoch line). Default False: only
    after a long loop (one that wrote a line, or lasted ``interval`` seconds)."""
    leave: bool = False
    """Keep the finished bar on a terminal (tqdm's ``leave``); in a log it writes the closing line, as
    ``summary``. Default False."""
    clock: Callable[[], float] = time.monotonic
    """Plain lines: the time source in seconds (default ``time.monotonic``; tests pass a fake one)."""


def is_terminal(stream: IO | None = None) -> bool:
    """Whether ``stream`` (default: ``sys.stderr``, where the bars go) is an interactive terminal;
    False for a file, a pipe, a closed stream or an object without ``isatty``."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _in_notebook() -> bool:
    """True in a Jupyter kernel with ipywidgets, where ``tqdm.auto`` draws a widget (no ``\\r`` frames)."""
    return any(cls.__module__ == "tqdm.notebook" for cls in tqdm.__mro__)


def uses_bars(stream: IO | None = None) -> bool:
    """Whether :func:`progress_bar` gives tqdm bars for ``stream`` (default ``sys.stderr``): on a
    terminal or in a Jupyter kernel; plain lines everywhere else."""
    return is_terminal(stream) or _in_notebook()


def write(message: str, file: IO | None = None) -> None:
    """Print ``message`` as one line (default to ``sys.stdout``): through ``tqdm.write`` when bars are
    drawn, so that a live bar moves below the message, else plainly and flushed, so that the line
    keeps its place among the progress lines of stderr in a log that holds both."""
    if uses_bars():
        tqdm.write(message, file=file)
    else:
        print(message, file=file if file is not None else sys.stdout, flush=True)


@contextmanager
def hf_bars_off_in_logs() -> Iterator[None]:
    """Inside the block, transformers' own bars (the "Loading weights" bar of ``from_pretrained``) are off
    when :func:`uses_bars` says no (a log file or a pipe would keep their frames), through transformers'
    supported switch (``transformers.utils.logging.disable_progress_bar``); they are switched back on
    after. On a terminal, or when they are off already (``HF_HUB_DISABLE_PROGRESS_BARS=1``), nothing changes."""
    # imported here, not above: transformers is heavy, and only the loading of a model needs it
    from transformers.utils import logging as hf_logging

    quiet = hf_logging.is_progress_bar_enabled() and not uses_bars()
    if quiet:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if quiet:
            hf_logging.enable_progress_bar()


def progress_bar(iterable: Iterable | None = None, *, total: float | None = None, desc: str = "", unit: Unit = Unit(),
                 initial: int = 0, disable: bool = False, file: IO | None = None,
                 display: Display = Display()) -> tqdm | PlainProgress:
    """A tqdm bar when the bars are drawn (:func:`uses_bars` of ``file``), else a :class:`PlainProgress`.

    Args:
        iterable: what to loop over (optional; else call ``update``).
        total: the expected count (default: ``len(iterable)`` when it has one; None = unknown).
        desc: the label, e.g. ``"epoch 2/5"``.
        unit: what is counted and how counts are written (:class:`Unit`; default ``it``, whole counts;
            :data:`BYTES` for a download).
        initial: the count it starts from (a resumed epoch). Default 0.
        disable: show nothing at all (e.g. ``train.progress=false``, or not rank 0). Default False.
        file: where the bar or the lines go. Default ``sys.stderr``.
        display: when plain lines are written and what stays at the end (:class:`Display`; default a line
            per tenth, at most one per 30 seconds, the closing line only after a long loop).
    """
    if not disable and uses_bars(file):
        return tqdm(iterable, total=total, desc=desc, unit=unit.name, initial=initial, leave=display.leave,
                    unit_scale=unit.scale, unit_divisor=unit.divisor, file=file, dynamic_ncols=True)
    return PlainProgress(iterable, total=total, desc=desc, unit=unit, initial=initial, disable=disable, file=file,
                         display=display)


class PlainProgress:
    """Progress as whole lines (no carriage return): tqdm's interface for a stream that is not a
    terminal. Arguments as for :func:`progress_bar` (``display.leave`` writes the closing line, as
    ``display.summary``).

    ``n`` is the count so far, ``lines`` the number of lines written.
    """

    def __init__(self, iterable: Iterable | None = None, total: float | None = None, desc: str = "",
                 unit: Unit = Unit(), initial: int = 0, disable: bool = False, file: IO | None = None,
                 display: Display = Display()):
        if not 0 < display.every <= 1:
            raise ValueError(f"every must be a fraction in (0, 1], got {display.every}")
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)
        self.iterable, self.total, self.desc, self.unit = iterable, total, desc, unit.name
        self.n = self.initial = initial
        self.disable, self.summary = disable, display.summary or display.leave
        self.unit_scale, self.unit_divisor = unit.scale, unit.divisor
        self.file, self.every, self.interval, self.clock = file, display.every, display.interval, display.clock
        self.postfix = ""
        self.lines = 0
        self.closed = False
        self.started = self.last_line = self.clock()
        self._last_n: float | None = None  # the count the last line showed
        self._next_mark = self._mark_after(initial)

    # --- tqdm's interface ----------------------------------------------------------------------
    def __iter__(self) -> Iterator:
        if self.iterable is None:
            raise TypeError("PlainProgress: nothing to iterate (created without an iterable)")
        try:
            for item in self.iterable:
                yield item
                self.update(1)
        finally:
            self.close()

    def __len__(self) -> int:
        return int(self.total) if self.total is not None else len(self.iterable)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False

    def update(self, n: float = 1) -> None:
        """Count ``n`` more; writes a line when one is due (see the module's docstring)."""
        self.n += n
        if self.disable or self.closed:
            return
        now = self.clock()
        if now - self.last_line < self.interval:
            return
        if self.total:
            if self.n < self._next_mark:
                return
            self._next_mark = self._mark_after(self.n)
        self._emit(now)

    def set_postfix(self, ordered_dict: dict | None = None, refresh: bool = True, **kwargs) -> None:
        """Values shown after the numbers, as tqdm shows them (``loss=1.337, task=ner``: keyword
        arguments sorted by name, numbers in tqdm's short form). ``refresh`` is accepted for tqdm's sake."""
        items = dict(ordered_dict or {})
        items.update((key, kwargs[key]) for key in sorted(kwargs))
        self.postfix = ", ".join(f"{k}={tqdm.format_num(v) if isinstance(v, (int, float)) else str(v).strip()}"
                                 for k, v in items.items())

    def set_description(self, desc: str = "", refresh: bool = True) -> None:
        self.desc = desc

    @staticmethod
    def write(message: str, file: IO | None = None) -> None:
        """One line of text (see the module's :func:`write`)."""
        write(message, file)

    def close(self) -> None:
        """End the loop: the closing line when ``summary`` is set or the loop was long (wrote a line,
        or lasted ``interval`` seconds), unless the last line shows the same count; then nothing more
        is written."""
        if self.closed:
            return
        self.closed = True
        if self.disable:
            return
        now = self.clock()
        if self.n == self._last_n:  # the last line written already shows the end
            return
        if self.summary or self.lines or now - self.started >= self.interval:
            self._emit(now)

    # --- lines -------------------------------------------------------------------------------
    def line(self, now: float | None = None) -> str:
        """The line for the current count: tqdm's own meter without the bar."""
        elapsed = (self.clock() if now is None else now) - self.started
        return tqdm.format_meter(self.n, self.total, elapsed, ncols=0, prefix=self.desc, unit=self.unit,
                                 unit_scale=self.unit_scale, unit_divisor=self.unit_divisor,
                                 postfix=self.postfix or None, initial=self.initial)

    def _emit(self, now: float) -> None:
        stream = self.file if self.file is not None else sys.stderr
        if stream is not sys.stdout:
            sys.stdout.flush()  # what was printed before keeps its place in a log holding both streams
        stream.write(self.line(now) + "\n")
        stream.flush()
        self.lines += 1
        self.last_line, self._last_n = now, self.n

    def _mark_after(self, n: float) -> float:
        """The next multiple of ``every * total`` above ``n`` (infinite without a total)."""
        if not self.total:
            return float("inf")
        step = self.every * self.total
        return (int(n / step + 1e-9) + 1) * step
