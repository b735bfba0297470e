"""Sets of attention heads: their names and the random sets a null hypothesis draws.

A head is named ``L<layer>H<head>`` (both from 0), as in every table and picture of the project; a
set of heads is a bool grid ``[layers, heads]`` or, flattened layer by layer, ``[layers * heads]``.

Random sets come in three kinds; every test that holds a set of heads against chance prints the first two:

- *global*: any heads of the grid (:func:`random_sets`, :func:`block_permutations`);
- *layer-matched*: the same number of heads in each layer as the tested set (:func:`layer_matched_sets`,
  :func:`layer_permutations`). Pruning keeps low layers far more than high ones, so a set of
  surviving heads is mostly low-layer heads; against a global null, *any* low-layer set looks
  special. The layer-matched null asks whether these heads matter beyond their layer;
- *cell-matched*: the same number of heads in each cell of a partition of the grid
  (:func:`cell_matched_sets`), such as each layer cut into bins by how much the model relies on each
  head (:func:`importance_cells`, Michel et al. 2019's importance): whether a set matters beyond its
  layer *and* its heads' importance (the EWT study's round-3 rules, claim 6).

How many distinct sets such a null can draw is :func:`possible_sets`; where it is few, the exact law of the
draws (several grids drawn from one row of uniforms, as the EWT study pools seeds) is :func:`cell_matched_law`.

Query heads that share one gate (a key/value group, ``encoder.gate_groups=kv``; adjacent in a row)
are drawn a whole group at a time (``block``): heads that always move together are one draw.
Written with numpy alone (no torch), so that reports and the ablation code share it.
"""
from __future__ import annotations

import functools
import itertools
import math
import re
from typing import Sequence

import numpy as np

__all__ = ["head_name", "parse_head", "head_names", "head_grid", "block_permutations", "layer_permutations",
           "seeded_permutations", "random_sets", "random_sets_from", "layer_matched_sets", "layer_matched_from",
           "cell_matched_sets", "importance_cells", "possible_sets", "cell_matched_law", "LAW_STATES"]

_NAME = re.compile(r"^L(\d+)H(\d+)$")


def head_name(layer: int, head: int) -> str:
    """``L<layer>H<head>``."""
    return f"L{int(layer)}H{int(head)}"


def parse_head(name: str) -> tuple[int, int]:
    """``(layer, head)`` of ``L<layer>H<head>`` (case and spaces ignored); ValueError otherwise."""
    found = _NAME.match(str(name).strip().upper())
    if not found:
        raise ValueError(f"{name!r} is not a head name (L<layer>H<head>, from 0: L0H2)")
    return int(found.group(1)), int(found.group(2))


def head_names(chosen: np.ndarray) -> list[str]:
    """The names of the heads of a bool grid ``[layers, heads]``, layer by layer."""
    return [head_name(layer, head) for layer, head in zip(*np.nonzero(np.asarray(chosen, dtype=bool)))]


def head_grid(names: Sequence[str], layers: int, heads: int) -> np.ndarray:
    """``[layers, heads]`` bool grid of head names ``L<layer>H<head>`` (0-based); ValueError naming the
    first bad one (not a head name, outside the grid, listed twice) or for an empty list."""
    grid = np.zeros((layers, heads), dtype=bool)
    if not names:
        raise ValueError("no heads given: name at least one, e.g. L0H2,L1H0")
    for name in names:
        layer, head = parse_head(name)
        if layer >= layers or head >= heads:
            raise ValueError(f"{name}: outside the {layers} x {heads} grid of this encoder "
                             f"(L0H0 to {head_name(layers - 1, heads - 1)})")
        if grid[layer, head]:
            raise ValueError(f"{name}: listed twice")
        grid[layer, head] = True
    return grid


def block_permutations(rng: np.random.Generator, count: int, size: int, block: int = 1) -> np.ndarray:
    """``[count, size]`` random permutations of ``size`` positions that move runs of ``block`` adjacent
    positions together (a KV group's query heads, adjacent in a flattened ``[layers, heads]`` grid);
    ``block`` 1: plain permutations. ``size`` must be a multiple of ``block``."""
    order = np.argsort(rng.random((count, size // block)), axis=1)  # [count, blocks]
    return (order[:, :, None] * block + np.arange(block)).reshape(count, size)


def layer_permutations(rng: np.random.Generator, count: int, layers: int, heads: int, block: int = 1) -> np.ndarray:
    """``[count, layers * heads]`` random permutations of a flattened grid that move heads only within
    their layer (whole runs of ``block`` heads, as :func:`block_permutations`); ``heads`` must be a
    multiple of ``block``."""
    order = np.argsort(rng.random((count, layers, heads // block)), axis=2)  # [count, layers, blocks]
    within = (order[..., None] * block + np.arange(block)).reshape(count, layers, heads)  # [count, layers, heads]
    return (within + (np.arange(layers) * heads)[None, :, None]).reshape(count, layers * heads)


@functools.lru_cache(maxsize=16)
def seeded_permutations(seed: int, count: int, layers: int, heads: int, block: int = 1,
                        kinds: tuple[str, ...] = ("global",)) -> tuple[np.ndarray, ...]:
    """What a fresh ``numpy.random.default_rng(seed)`` draws for ``kinds``, one after another: per kind a
    ``[count, layers * heads]`` array of permutations of the flattened grid, ``global``
    (:func:`block_permutations`) or ``layer`` (:func:`layer_permutations`); ``block`` as theirs.

    Memoised (the 16 latest), read-only and in the smallest integer type that holds a position: a null
    computed again with the same seed (for each pair of settings, with each seed left out in turn) reads the
    same draws instead of drawing 100,000 permutations again. The values are those the functions give."""
    rng = np.random.default_rng(seed)
    out = []
    for kind in kinds:
        if kind not in ("global", "layer"):
            raise ValueError(f"kinds: 'global' or 'layer', got {kind!r}")
        order = block_permutations(rng, count, layers * heads, block) if kind == "global" else \
            layer_permutations(rng, count, layers, heads, block)
        order = order.astype(np.min_scalar_type(max(layers * heads - 1, 0)))
        order.setflags(write=False)
        out.append(order)
    return tuple(out)


def random_sets(rng: np.random.Generator, count: int, chosen: np.ndarray, block: int = 1) -> np.ndarray:
    """``[count, k]`` flat indices of ``count`` random head sets of the size of ``chosen`` (a bool grid
    ``[layers, heads]`` or flat), anywhere in the grid: as many whole ``block`` groups as ``chosen``
    covers (``k`` = groups x block)."""
    chosen = np.asarray(chosen, dtype=bool).ravel()
    return random_sets_from(block_permutations(rng, count, chosen.size, block), chosen, block)


def random_sets_from(order: np.ndarray, chosen: np.ndarray, block: int = 1) -> np.ndarray:
    """:func:`random_sets` from its draws: ``order`` ``[count, heads]``, permutations of the flattened grid
    (:func:`block_permutations`, or :func:`seeded_permutations`' ``global`` kind): the first positions of each."""
    groups = -(-int(np.asarray(chosen, dtype=bool).sum()) // block)
    return order[:, :groups * block]


def layer_matched_sets(rng: np.random.Generator, count: int, chosen: np.ndarray, block: int = 1) -> np.ndarray:
    """``[count, k]`` flat indices of ``count`` random head sets with as many heads in each layer as
    ``chosen`` (a bool grid ``[layers, heads]``): in each layer, that many whole ``block`` groups drawn
    at random from the layer's heads. A layer whose every head is chosen gives the same heads in every
    set (the null cannot vary there)."""
    chosen = np.asarray(chosen, dtype=bool)
    layers, heads = chosen.shape
    return layer_matched_from(layer_permutations(rng, count, layers, heads, block), chosen, block)


def layer_matched_from(order: np.ndarray, chosen: np.ndarray, block: int = 1) -> np.ndarray:
    """:func:`layer_matched_sets` from its draws: ``order`` ``[count, layers * heads]``, within-layer
    permutations (:func:`layer_permutations`, or :func:`seeded_permutations`' ``layer`` kind)."""
    chosen = np.asarray(chosen, dtype=bool)
    layers, heads = chosen.shape
    order = np.asarray(order).reshape(len(order), layers, heads)
    parts = [order[:, layer, :-(-int(chosen[layer].sum()) // block) * block] for layer in range(layers)]
    return np.concatenate(parts, axis=1) if parts else np.zeros((len(order), 0), dtype=int)


def cell_matched_sets(rng: np.random.Generator, count: int, chosen: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """``[count, k]`` flat indices of ``count`` random head sets with as many heads in each cell as
    ``chosen`` (a bool grid ``[layers, heads]``): ``cells`` (an int grid of the same shape) names each
    head's cell, and in each cell that many heads are drawn uniformly from the cell's heads (``chosen``'s
    own heads are one possible draw). Cells in ascending id order, each cell's heads as drawn.

    Set i is drawn from the i-th row of one ``[count, heads]`` draw of uniforms (each cell's heads ranked by
    theirs), as :func:`layer_matched_sets` draws: the first N sets of ``count`` >= N are those of ``count`` = N,
    so that a null is extended (250 sets to 1,000: docs/ewt-study/rules-round3.md) by drawing again with more."""
    chosen, cells = np.asarray(chosen, dtype=bool).ravel(), np.asarray(cells).ravel()
    if chosen.shape != cells.shape:
        raise ValueError(f"cells: expected one cell id per head ({chosen.size}), got {cells.size}")
    uniforms = rng.random((count, chosen.size))  # [count, heads]: set i's row, whatever count is
    parts = []
    for cell in np.unique(cells):
        members = np.flatnonzero(cells == cell)  # [n]
        k = int(chosen[members].sum())
        if k:
            order = np.argsort(uniforms[:, members], axis=1)[:, :k]  # [count, k]
            parts.append(members[order])
    return np.concatenate(parts, axis=1) if parts else np.zeros((count, 0), dtype=int)


def importance_cells(importance: np.ndarray, bins: int = 3) -> np.ndarray:
    """``[layers, heads]`` cell ids that cut each layer into ``bins`` bins (default 3) by its heads'
    ``importance`` (``[layers, heads]``, larger: more important): within a layer the heads are ranked from
    the least to the most important (ties by head index) and the rank's bin is ``rank * bins // heads``;
    the cell of a head is ``layer * bins + bin`` (MiniLM's 12 heads a layer, 3 bins: 4 heads each)."""
    importance = np.asarray(importance, dtype=float)
    layers, heads = importance.shape
    if not 1 <= bins <= heads:
        raise ValueError(f"bins: expected 1 to {heads} (the heads of a layer), got {bins}")
    rank = np.argsort(np.argsort(importance, axis=1, kind="stable"), axis=1, kind="stable")  # [layers, heads]
    return np.arange(layers)[:, None] * bins + rank * bins // heads


def possible_sets(chosen: np.ndarray, block: int = 1, cells: np.ndarray | None = None) -> int:
    """How many distinct random sets a matched null can draw for ``chosen`` (bool ``[layers, heads]``).
    Layer-matched (``cells`` None, the default): the product over layers of C(units, chosen units), ``block``
    adjacent heads a unit (default 1). Cell-matched (``cells``: an int grid of cell ids of ``chosen``'s shape,
    such as :func:`importance_cells`; ``block`` 1): the product over cells of C(the cell's heads, chosen heads
    there). 1: the null is degenerate, every random set is ``chosen`` itself."""
    chosen = np.asarray(chosen, dtype=bool)
    if cells is None:
        units = chosen.shape[1] // block
        return math.prod(math.comb(units, -(-int(k) // block)) for k in chosen.sum(1))
    if block != 1:
        raise ValueError("cell-matched random sets draw single heads (block 1)")
    cells, flat = np.asarray(cells).ravel(), chosen.ravel()
    if cells.shape != flat.shape:
        raise ValueError(f"cells: expected one cell id per head ({flat.size}), got {cells.size}")
    return math.prod(math.comb(int((cells == c).sum()), int(flat[cells == c].sum())) for c in np.unique(cells))


LAW_STATES = 4_000_000  # the most (joint outcomes x prefixes) one group of tied heads may enumerate: a few seconds


def cell_matched_law(chosen: Sequence[np.ndarray], cells: Sequence[np.ndarray], streams: Sequence[int] | None = None,
                     limit: int = 1_000_000) -> list[tuple[tuple[tuple[int, ...], ...], float]] | None:
    """The exact law of :func:`cell_matched_sets`' i-th draw for several grids at once: grid g draws a set with as
    many heads in each cell of ``cells[g]`` as ``chosen[g]`` has there (both ``[layers, heads]``, one shape), from
    row i of a stream of uniforms; grids of one ``streams`` id read the same row (records drawn from one numpy seed:
    claim 6 pools seeds by set i), grids of different ids independent rows (default: one stream for all).

    Returns ``[(sets, probability)]``, ``sets`` a tuple of each grid's set as sorted flat indices, every joint
    draw of positive probability once (the probabilities sum to 1); None when the law is too large to enumerate:
    more than ``limit`` joint draws (default 1,000,000), or a group of heads tied by the grids' cells whose
    enumeration would pass :data:`LAW_STATES` (or hold more than 16 heads).

    Why by hand: in a cell the draw keeps the k heads of the smallest uniforms, so a joint draw is the event that
    every cell's kept heads come before its other heads in one random order of the heads, and its probability is
    the number of orders that satisfy every grid's cells at once (the linear extensions of that partial order,
    counted by dynamic programming over the sets of heads placed first) over the number of orders. No library
    counts those; heads tied by no cell of 0 < k < n heads are independent and multiply."""
    grids = [np.asarray(c, dtype=bool).ravel() for c in chosen]
    cells = [np.asarray(c).ravel() for c in cells]
    streams = list(streams) if streams is not None else [0] * len(grids)
    if not (len(grids) == len(cells) == len(streams)) or any(c.shape != g.shape for g, c in zip(grids, cells)):
        raise ValueError("chosen, cells and streams: one grid, one cell grid of its shape and one stream each")
    ids = {s: i for i, s in enumerate(dict.fromkeys(streams))}
    fixed = [set() for _ in grids]  # heads every draw of a grid keeps: cells kept whole
    units = []  # (grid, members as variables, k): cells whose draw varies; a variable is (stream, head)
    for g, (grid, cell) in enumerate(zip(grids, cells)):
        for c in np.unique(cell):
            members = np.flatnonzero(cell == c)
            k = int(grid[members].sum())
            if k == len(members):
                fixed[g].update(members.tolist())
            elif k:
                units.append((g, [(ids[streams[g]], int(h)) for h in members], k))
    parent: dict = {}

    def root(v):
        while parent.setdefault(v, v) != v:
            v = parent[v]
        return v
    for _, members, _ in units:
        for v in members[1:]:
            parent[root(v)] = root(members[0])
    groups: dict = {}
    for unit in units:
        groups.setdefault(root(unit[1][0]), []).append(unit)
    laws = []  # per group of tied heads: [(kept heads per grid, probability)]
    for group in groups.values():
        law = _group_law(group, len(grids))
        if law is None:
            return None
        laws.append(law)
    if math.prod(len(law) for law in laws) > limit:
        return None
    out = []
    for combo in itertools.product(*laws):
        sets = [set(f) for f in fixed]
        probability = 1.0
        for kept, p in combo:
            probability *= p
            for g, heads in enumerate(kept):
                sets[g].update(heads)
        out.append((tuple(tuple(sorted(s)) for s in sets), probability))
    return out


def _group_law(units: list, grids: int) -> list[tuple[tuple[tuple[int, ...], ...], float]] | None:
    """:func:`cell_matched_law` for one group of heads tied by ``units`` (``(grid, members, k)``): each joint choice
    of every unit's k kept members, with the share of the orders of the group's heads in which each unit's kept
    members come before its others; choices no order satisfies are left out. None past :data:`LAW_STATES`."""
    variables = sorted({v for _, members, _ in units for v in members})
    index = {v: i for i, v in enumerate(variables)}
    n = len(variables)
    choices = [list(itertools.combinations(members, k)) for _, members, k in units]
    outcomes = math.prod(len(c) for c in choices)
    if n > 16 or outcomes << n > LAW_STATES:
        return None
    joint = list(itertools.product(*choices))  # [outcomes][units]: the kept members of each unit
    before = np.zeros((len(joint), n), dtype=np.int64)  # [outcomes, heads]: bit mask of the heads that come first
    for o, kept in enumerate(joint):
        for (_, members, _), first in zip(units, kept):
            mask = sum(1 << index[v] for v in first)
            for v in members:
                if v not in first:
                    before[o, index[v]] |= mask
    orders = np.zeros((len(joint), 1 << n))  # [outcomes, prefixes]: orders of each prefix set of heads (exact: < 2^53)
    orders[:, 0] = 1
    for prefix in range(1 << n):  # a prefix is numbered below every prefix that extends it
        count = orders[:, prefix]
        if not count.any():
            continue
        for v in range(n):
            if not prefix >> v & 1:
                orders[:, prefix | 1 << v] += count * ((before[:, v] & ~prefix) == 0)
    share = orders[:, -1] / math.factorial(n)
    law = []
    for kept, p in zip(joint, share):
        if p > 0:
            sets = [[] for _ in range(grids)]
            for (g, _, _), first in zip(units, kept):
                sets[g].extend(h for _, h in first)
            law.append((tuple(tuple(s) for s in sets), float(p)))
    return law
