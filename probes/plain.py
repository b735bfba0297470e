"""Plain, slow implementations of every probe, which the fast probes are checked against: Python
loops over sentences, layers, heads and units on per-sentence numpy arrays, written from the
definitions in He & Choi (2021) and Clark et al. (2019) without the vectorised helpers of the fast
probes.

The tests check the fast probes against these on fixtures; ``bench/probe_speed.py`` times them.
Each function returns a table in the fast probe's format (layer, head, label, score, count, and the
same extra columns), so the two can be merged and compared row by row. ``causal=True`` gives the
tables of a causal (decoder-only) model: the ``reachable`` columns, Clark's per-direction
baselines, Voita's positional offsets -5..0 (see the probe modules).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd

from mtl_heads.data.sentence import Sentence
from probes.attention import VERB_ROLES
from probes.base import is_punctuation
from probes.clark import DIRECTIONS, OFFSETS
from probes.sink import LABEL as SINK_LABEL
from probes.clustering import lowest_phrases
from probes.voita import MAX_OFFSET, POSITIONAL, RARE, SYNTACTIC

__all__ = ["Captured", "split_batch", "slots_of", "word_map", "plain_dep", "plain_srl", "plain_clustering",
           "plain_clark", "plain_voita", "plain_sink", "UNITS"]


@dataclass
class Captured:
    """One sentence after a forward pass with capture (no padding).

    word_index: per sub-word, the word (-1 for specials); attentions: ``[L, H, T, T]`` float64;
    head_contexts: ``[T, L, H, d]`` float64.
    """

    sentence: Sentence
    word_index: list[int]
    attentions: np.ndarray
    head_contexts: np.ndarray


def split_batch(batch) -> list[Captured]:
    """Per-sentence records of a :class:`probes.base.ProbeBatch` (its padding cut off)."""
    out = []
    for i, sentence in enumerate(batch.sentences):
        t = int(batch.attention_mask[i].sum())
        attn = batch.attentions[i, :, :, :t, :t].double().cpu().numpy() if batch.has_attentions else None
        ctx = batch.head_contexts[i, :t].double().cpu().numpy() if batch.has_head_contexts else None
        out.append(Captured(sentence, batch.word_index[i, :t].tolist(), attn, ctx))
    return out


# ---------------------------------------------------------------------- word-level maps
def slots_of(word_index: list[int], n_words: int) -> list[int]:
    """Slot per sub-word: 0 before the first word ([CLS]), w + 1 for word w, n + 1 after ([SEP])."""
    slots, seen = [], False
    for w in word_index:
        if w >= 0:
            seen = True
            slots.append(w + 1)
        else:
            slots.append(n_words + 1 if seen else 0)
    return slots


def word_map(attn: np.ndarray, slots: list[int], n_slots: int) -> np.ndarray:
    """One head's word-level map: average the rows of a slot's pieces, sum the columns."""
    out = np.zeros((n_slots, n_slots))
    for i in range(n_slots):
        rows = [t for t, s in enumerate(slots) if s == i]
        for j in range(n_slots):
            cols = [u for u, s in enumerate(slots) if s == j]
            if rows:
                out[i, j] = sum(sum(attn[t, u] for u in cols) for t in rows) / len(rows)
    return out


def first_argmax(row: np.ndarray, candidates) -> int | None:
    """The candidate with the largest value (the first one when tied), None without candidates."""
    best = None
    for j in candidates:
        if best is None or row[j] > row[best]:
            best = j
    return best


def positive_argmax(row: np.ndarray, candidates) -> int | None:
    """:func:`first_argmax`, but None when the best candidate has no weight at all."""
    best = first_argmax(row, candidates)
    return best if best is not None and row[best] > 0 else None


def _maps(record: Captured) -> list[list[np.ndarray]]:
    n = len(record.sentence.words)
    slots = slots_of(record.word_index, n)
    L, H = record.attentions.shape[:2]
    return [[word_map(record.attentions[l, h], slots, n + 2) for h in range(H)] for l in range(L)]


def _has_start(record: Captured) -> bool:
    """The sentence's input has a start token before its first word ([CLS], BOS)."""
    return bool(record.word_index) and record.word_index[0] < 0


def _table(hits: dict, counts: Counter, L: int, H: int, scale: float = 100.0, **extra) -> pd.DataFrame:
    rows = []
    for label in hits:
        for l in range(L):
            for h in range(H):
                row = {"layer": l, "head": h, "label": label, "score": scale * hits[label][l][h] / counts[label],
                       "count": counts[label]}
                row.update({k: v[label] for k, v in extra.items()})
                rows.append(row)
    return pd.DataFrame(rows)


def _grid(L: int, H: int) -> list[list[float]]:
    return [[0.0] * H for _ in range(L)]


def universal(rel: str) -> str:
    """``nsubj:pass`` -> ``nsubj``: the label without its UD subtype."""
    return rel.split(":")[0]


def _label(rel: str, relations: str) -> str:
    return universal(rel) if relations == "universal" else rel


# ---------------------------------------------------------------------- DEP / SRL
def plain_dep(records: list[Captured], root: str = "cls", relations: str = "full",
              causal: bool = False) -> pd.DataFrame:
    """DEP attention probe. ``root="cls"``: argmax over [CLS] + words (self included); root arcs
    use [CLS]. ``root="none"``: root arcs skipped; argmax over the words (self included), and a row
    with no weight on any word predicts nothing. ``relations="universal"``: UD subtypes dropped.
    ``causal``: a ``reachable`` column, % of the relation's arcs with the head before the dependent
    (read through the dependent's row) or after it (through the head's row), the root slot only
    when the sentence has a start token."""
    hits, counts, reachable = {}, Counter(), Counter()
    L = H = 0
    for record in records:
        s = record.sentence
        if not s.has("deps"):
            continue
        L, H = record.attentions.shape[:2]
        maps, n = _maps(record), len(s.words)
        candidates = range(n + 1) if root == "cls" else range(1, n + 1)

        def predict(row: np.ndarray):
            best = first_argmax(row, candidates)
            return best if root == "cls" or row[best] > 0 else None

        for d, (head, rel) in enumerate(zip(s.heads, s.rels)):
            if root == "none" and head == 0:
                continue
            rel = _label(rel, relations)
            counts[rel] += 1
            present = head > 0 or _has_start(record)
            reachable[rel] += (present and head < d + 1) or d + 1 < head  # through the dependent's / head's row
            hits.setdefault(rel, _grid(L, H))
            for l in range(L):
                for h in range(H):
                    m = maps[l][h]
                    if predict(m[d + 1]) == head or predict(m[head]) == d + 1:
                        hits[rel][l][h] += 1
    extra = {"reachable": {r: 100.0 * reachable[r] / counts[r] for r in counts}} if causal else {}
    return _table(hits, counts, L, H, **extra)


def plain_srl(records: list[Captured], causal: bool = False) -> pd.DataFrame:
    """SRL attention probe: a span is found if one of its words attends to the predicate or the
    predicate to one of its words. ``causal``: a ``reachable`` column, % of the role's arguments
    with a word at or after the predicate, or a word at or before it."""
    hits, counts, reachable = {}, Counter(), Counter()
    L = H = 0
    for record in records:
        s = record.sentence
        if not s.has("srl"):
            continue
        L, H = record.attentions.shape[:2]
        maps, n = _maps(record), len(s.words)
        for p, arguments in zip(s.predicates, s.arguments):
            for start, end, role in arguments:
                if role in VERB_ROLES:
                    continue
                counts[role] += 1
                reachable[role] += any(w >= p for w in range(start, end)) or any(w <= p for w in range(start, end))
                hits.setdefault(role, _grid(L, H))
                for l in range(L):
                    for h in range(H):
                        m = maps[l][h]
                        found = any(first_argmax(m[w + 1], range(n + 1)) == p + 1 for w in range(start, end))
                        found = found or start + 1 <= first_argmax(m[p + 1], range(n + 1)) < end + 1
                        hits[role][l][h] += found
    extra = {"reachable": {r: 100.0 * reachable[r] / counts[r] for r in counts}} if causal else {}
    return _table(hits, counts, L, H, **extra)


# ---------------------------------------------------------------------- clustering
UNITS = {
    "pos": lambda s: [(i, i + 1, t) for i, t in enumerate(s.pos)] if s.has("pos") else [],
    "ner": lambda s: list(s.entities) if s.has("entities") else [],
    "con": lambda s: lowest_phrases(s.tree) if s.has("tree") else [],
}


def _unit_features(record: Captured, start: int, end: int, pool: str = "mean") -> np.ndarray:
    """``[L, H, d]``: the mean over the unit's sub-words (``mean``), or over its words of each word's
    first / last sub-word (``first`` / ``last``)."""
    if pool == "mean":
        pieces = [t for t, w in enumerate(record.word_index) if start <= w < end]
    else:
        pieces = []
        for word in range(start, end):
            own = [t for t, w in enumerate(record.word_index) if w == word]
            pieces.append(own[0] if pool == "first" else own[-1])
    return sum(record.head_contexts[t] for t in pieces) / len(pieces)  # [L, H, d]


def _cosine(x: np.ndarray, y: np.ndarray) -> float:
    nx, ny = np.sqrt((x * x).sum()), np.sqrt((y * y).sum())
    return float((x * y).sum() / (nx * ny)) if nx > 0 and ny > 0 else 0.0


def plain_clustering(fit_records: list[Captured], records: list[Captured], kind: str,
                     pool: str = "mean") -> pd.DataFrame:
    """Pseudo-clustering probe ``kind`` (pos | ner | con): centroids from ``fit_records``, nearest
    centroid by cosine on ``records``; a zero feature is a miss. ``pool``: see :func:`_unit_features`."""
    units = UNITS[kind]
    sums, sizes = {}, Counter()
    for record in fit_records:
        for start, end, label in units(record.sentence):
            x = _unit_features(record, start, end, pool)
            sums[label] = sums.get(label, 0) + x
            sizes[label] += 1
    centroids = {label: sums[label] / sizes[label] for label in sums}
    order = list(centroids)
    hits, counts = {}, Counter()
    L = H = 0
    for record in records:
        for start, end, label in units(record.sentence):
            x = _unit_features(record, start, end, pool)
            L, H = x.shape[:2]
            counts[label] += 1
            hits.setdefault(label, _grid(L, H))
            for l in range(L):
                for h in range(H):
                    if not np.any(x[l, h]):
                        continue
                    sims = [_cosine(x[l, h], centroids[c][l, h]) for c in order]
                    hits[label][l][h] += order[int(np.argmax(sims))] == label
    return _table(hits, counts, L, H)


# ---------------------------------------------------------------------- Clark et al.
def _relation_hits(records: list[Captured], relations: str = "full"):
    """Per relation: hits[direction][l][h], offset hits, counts, and arcs with the head first /
    the dependent first (root arcs left out). A word whose row (column) gives the other words no
    weight predicts nothing."""
    hits, base, counts, order = {}, {}, Counter(), {}
    L = H = 0
    for record in records:
        s = record.sentence
        if not s.has("deps"):
            continue
        L, H = record.attentions.shape[:2]
        maps, n = _maps(record), len(s.words)
        for d, (head, rel) in enumerate(zip(s.heads, s.rels)):
            if head == 0:
                continue
            rel = _label(rel, relations)
            counts[rel] += 1
            hits.setdefault(rel, [_grid(L, H), _grid(L, H)])
            base.setdefault(rel, [0] * len(OFFSETS))
            order.setdefault(rel, [0, 0])
            order[rel][0] += head < d + 1
            order[rel][1] += d + 1 < head
            others = [j for j in range(1, n + 1) if j != d + 1]
            for l in range(L):
                for h in range(H):
                    m = maps[l][h]
                    hits[rel][0][l][h] += positive_argmax(m[d + 1], others) == head
                    hits[rel][1][l][h] += positive_argmax(m[:, d + 1], others) == head
            for k, o in enumerate(OFFSETS):
                base[rel][k] += max(0, min(d + 1 + o, n)) == head
    return hits, base, counts, order, L, H


def _relation_table(records: list[Captured], relations: str = "full", causal: bool = False) -> pd.DataFrame:
    hits, base, counts, order, L, H = _relation_hits(records, relations)
    parts = []
    for k, name in enumerate(DIRECTIONS):
        # a causal head: dep->head only back (offsets < 0), head->dep only forward (offsets > 0)
        allowed = [i for i, o in enumerate(OFFSETS) if not causal or (o < 0 if k == 0 else o > 0)]
        best = {r: max(allowed, key=lambda i: (base[r][i], -i)) for r in base}
        extra = {"baseline": {r: 100.0 * base[r][best[r]] / counts[r] for r in base},
                 "baseline_offset": {r: OFFSETS[best[r]] for r in base}}
        if causal:
            extra["reachable"] = {r: 100.0 * order[r][k] / counts[r] for r in base}
        parts.append(_table({r: hits[r][k] for r in hits}, counts, L, H, direction={r: name for r in hits}, **extra))
    return pd.concat(parts, ignore_index=True) if hits else pd.DataFrame()


def plain_clark(records: list[Captured], start_name: str = "to [CLS]", end_name: str = "to [SEP]",
              relations: str = "full", causal: bool = False) -> pd.DataFrame:
    """Clark et al.: relation accuracy in both directions vs the best offset, plus attention to
    [CLS] / [SEP] / punctuation and entropy per sentence (token level), averaged over sentences;
    [CLS] / [SEP] only when some sentence has that token. ``relations="universal"``: UD subtypes
    dropped. ``causal``: per-direction baselines and ``reachable`` (see :mod:`probes.clark`)."""
    table = _relation_table(records, relations, causal)
    L, H = records[0].attentions.shape[:2]
    sums = {name: _grid(L, H) for name in (start_name, end_name, "to punct", "entropy")}
    for record in records:
        s = record.sentence
        slots = slots_of(record.word_index, len(s.words))
        T = len(slots)
        kinds = {start_name: [u for u in range(T) if slots[u] == 0],
                 end_name: [u for u in range(T) if slots[u] == len(s.words) + 1],
                 "to punct": [u for u in range(T) if record.word_index[u] >= 0 and is_punctuation(s.words[record.word_index[u]])]}
        for l in range(L):
            for h in range(H):
                a = record.attentions[l, h]
                for name, keys in kinds.items():
                    sums[name][l][h] += sum(sum(a[q, k] for k in keys) for q in range(T)) / T
                entropy = 0.0
                for q in range(T):
                    entropy -= sum(p * np.log(p) for p in a[q] if p > 0)
                sums["entropy"][l][h] += entropy / T
    n = len(records)
    seen = {start_name: any(_has_start(r) for r in records),
            end_name: any(r.word_index and r.word_index[-1] < 0 and max(r.word_index) >= 0 for r in records)}
    extra = pd.DataFrame([{"layer": l, "head": h, "label": name, "score": sums[name][l][h] / n, "count": n}
                          for name in sums if seen.get(name, True) for l in range(L) for h in range(H)])
    return pd.concat([table, extra], ignore_index=True)


# ---------------------------------------------------------------------- Voita et al.
def plain_voita(records: list[Captured], frequencies: Counter, min_arcs: int = 100, causal: bool = False) -> pd.DataFrame:
    """Voita et al.: confidence, positional, rare-word (word queries, argmax over [CLS] + words +
    [SEP]) and syntactic heads (better direction vs the best offset over both directions).
    ``causal``: positional heads looked for at offsets -5..0 only."""
    L, H = records[0].attentions.shape[:2]
    confidence, rare = _grid(L, H), _grid(L, H)
    positions = [[Counter() for _ in range(H)] for _ in range(L)]
    words = 0
    for record in records:
        s = record.sentence
        n = len(s.words)
        maps = _maps(record)
        freq = [frequencies.get(w, 0) for w in s.words]
        rarest = {i + 1 for i in range(n) if freq[i] == min(freq)}
        words += n
        for l in range(L):
            for h in range(H):
                m = maps[l][h]
                for q in range(1, n + 1):
                    confidence[l][h] += max(m[q])
                    j = first_argmax(m[q], range(n + 2))
                    if 1 <= j <= n:
                        positions[l][h][j - q] += 1
                    rare[l][h] += j in rarest
    rows = []
    for l in range(L):
        for h in range(H):
            counts = [positions[l][h][o] for o in range(-MAX_OFFSET, (0 if causal else MAX_OFFSET) + 1)]
            best = max(range(len(counts)), key=lambda k: (counts[k], -k))
            share = 100.0 * counts[best] / words
            rows.append({"layer": l, "head": h, "label": "confidence", "score": confidence[l][h] / words, "count": words,
                         "offset": np.nan, "found": False})
            rows.append({"layer": l, "head": h, "label": "positional", "score": share, "count": words,
                         "offset": best - MAX_OFFSET, "found": share >= POSITIONAL})
            rows.append({"layer": l, "head": h, "label": "rare", "score": 100.0 * rare[l][h] / words, "count": words,
                         "offset": np.nan, "found": 100.0 * rare[l][h] / words > RARE})
    roles = pd.DataFrame(rows)
    relations = _relation_table(records, causal=causal)
    if relations.empty:
        return roles
    best_baseline = relations.groupby("label")["baseline"].max()
    better = relations.sort_values("score", ascending=False, kind="stable").drop_duplicates(["label", "layer", "head"])
    better = better.drop(columns=[c for c in ("baseline_offset", "reachable") if c in better])
    better["baseline"] = [best_baseline[label] for label in better["label"]]
    better["found"] = [score >= baseline + SYNTACTIC and count >= min_arcs
                       for score, baseline, count in zip(better["score"], better["baseline"], better["count"])]
    return pd.concat([roles, better], ignore_index=True)


# ---------------------------------------------------------------------- attention sink
def plain_sink(records: list[Captured]) -> pd.DataFrame:
    """Attention sink: per sentence, the mean over query tokens 1..T-1 of the weight on token 0,
    then the mean over sentences (one-token sentences skipped), in %."""
    L, H = records[0].attentions.shape[:2]
    sums, n = _grid(L, H), 0
    for record in records:
        T = record.attentions.shape[-1]
        if T < 2:
            continue
        n += 1
        for l in range(L):
            for h in range(H):
                sums[l][h] += sum(record.attentions[l, h, q, 0] for q in range(1, T)) / (T - 1)
    return pd.DataFrame([{"layer": l, "head": h, "label": SINK_LABEL, "score": 100.0 * sums[l][h] / max(n, 1), "count": n}
                         for l in range(L) for h in range(H)])
