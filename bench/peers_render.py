"""The results file of bench/peers.py and its tables: the markdown of docs/peers.md's second comparison.

The pairs (``PEERS``, each task's main metric ``METRICS``), the stopping rule (``CAP``, ``PATIENCE``)
and docs/peers.md's verdict rule (``MARGIN``, ``CLOSE``, ``FASTER``) live here, read by the runs
(bench/peers.py, bench/peers_sides.py) and by the tables alike. No torch: rendering a results file
(``python bench/peers.py --render docs/peers.json``) needs numpy and scipy only.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from scipy import stats

from mtl_heads.reports.claims.core import as_number

PEERS = {"dep": "supar BiaffineDependencyParser", "con": "supar CRFConstituencyParser",
         "pos": "HF AutoModelForTokenClassification + Trainer", "ner": "HF AutoModelForTokenClassification + Trainer"}
METRICS = {"dep": "las", "con": "f1", "pos": "accuracy", "ner": "f1"}
CAP, PATIENCE = 10, 2    # epochs at most; epochs without a better dev score before stopping
MARGIN = 0.5             # "equal within 0.5 points" (docs/peers.md)
CLOSE = 1.0              # seeds 4 and 5 too where the mean paired difference after 3 seeds is within this
FASTER = 0.10            # "faster" when the rate per real sub-word is this much above the other's, by both clocks
BY_LENGTH = "+by-length"  # a recipe's suffix for the careful-user speed runs (the Trainer's group_by_length
                          # training): the rule times them and does not judge their accuracy


# ----------------------------------------------------------------------------- results file
def read_results(path: Path | None) -> dict:
    """``{"records": [...]}`` of a results file (empty when there is none)."""
    if path is None or not path.is_file():
        return {"records": []}
    return json.loads(path.read_text())


# ----------------------------------------------------------------------------- the tables
def _ci(diffs: list[float]) -> tuple[float, float, float, float]:
    """Mean, sample sd and the two-sided 95% t-interval of paired differences (NaN with fewer than 2)."""
    d = np.asarray(diffs, dtype=float)
    if len(d) < 2:
        return float(d.mean()) if len(d) else math.nan, math.nan, math.nan, math.nan
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    return float(d.mean()), float(d.std(ddof=1)), float(d.mean() - half), float(d.mean() + half)


def seeds_to_resolve(sd: float, mean: float) -> str:
    """How many seeds the interval needs, at this spread, to settle the verdict: the fewest at which its
    half-width fits inside +-MARGIN around the mean (equal) or clears 0 (better, worse), whichever comes
    first (a mean just inside the margin, like -0.48, settles as worse long before it could as equal)."""
    room = max(MARGIN - abs(mean), abs(mean))
    if not (sd > 0) or room <= 0:
        return "no number of seeds at this spread"
    for n in range(2, 2001):
        if stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n) < room:
            return f"about {n} seeds at this spread"
    return "more than 2000 seeds"


def accuracy_verdict(diffs: list[float]) -> str:
    """The rule of docs/peers.md: better / worse / equal within 0.5 points / not resolved."""
    mean, sd, low, high = _ci(diffs)
    if len(diffs) < 2:
        return "one seed: no interval"
    if low > 0:
        return "better"
    if high < 0:
        return "worse"
    if -MARGIN <= low and high <= MARGIN:
        return f"equal within {MARGIN:g} points"
    return f"not resolved ({seeds_to_resolve(sd, mean)})"


FIRST_SEEDS, MORE_SEEDS = (1, 2, 3), (4, 5)  # the rule's seeds: the first three, then two more where close


def seeds_asked(diffs: dict[int, float]) -> tuple[int, ...]:
    """The seeds docs/peers.md's rule asks of a pair and recipe, given its paired differences so far
    (``{seed: ours - peer}``): seeds 1 to 3, and 4 and 5 too once the mean difference over seeds 1 to 3
    is within ``CLOSE`` points (decided on those three alone, so that later seeds cannot change it)."""
    if all(seed in diffs for seed in FIRST_SEEDS) and abs(np.mean([diffs[s] for s in FIRST_SEEDS])) <= CLOSE:
        return FIRST_SEEDS + MORE_SEEDS
    return FIRST_SEEDS


def paired_differences(results: dict, task: str, recipe: str) -> dict[int, float]:
    """``{seed: ours - peer}`` of the task's main metric, over the seeds where both sides finished."""
    records = [r for r in results["records"] if not r.get("error") and r["task"] == task]
    ours = {r["seed"]: r["scores"][METRICS[task]] for r in records if r["recipe"] == "ours"}
    return {r["seed"]: ours[r["seed"]] - r["scores"][METRICS[task]] for r in records
            if r["recipe"] == recipe and r["seed"] in ours}


def _rate(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else math.nan


def _pooled(records: list[dict], phase: str) -> dict:
    """Rates over all seeds: sentences per second (wall, CPU), the padding ratio (slots per real
    sub-word) and real sub-words per second (wall, CPU)."""
    if phase == "predict_sorted":
        sentences = sum(r["predict_sentences"] for r in records)
        wall, cpu = sum(r["sorted_wall"] for r in records), sum(r["sorted_cpu"] for r in records)
    else:
        sentences = sum(r[f"{phase}_sentences"] for r in records)
        wall, cpu = sum(r[f"{phase}_wall"] for r in records), sum(r[f"{phase}_cpu"] for r in records)
    slots = sum(r["subwords"].get(phase, [0, 0])[0] for r in records)
    real = sum(r["subwords"].get(phase, [0, 0])[1] for r in records)
    return {"sent": _rate(sentences, wall), "sent_cpu": _rate(sentences, cpu), "padding": slots / real if real else math.nan,
            "sub": _rate(real, wall), "sub_cpu": _rate(real, cpu)}


def speed_verdict(ours: dict, peer: dict) -> str:
    """Faster / slower / about equal per real sub-word (by both clocks: the rule of docs/peers.md), and
    what the gap is made of: the ratio of rates per sentence is the padding quotient (the peer's sub-word
    slots per real sub-word over ours) times the ratio of rates per slot (the work each side does per
    sub-word it runs: encoder, decoder, decoding)."""
    up = [ours[k] / peer[k] for k in ("sub", "sub_cpu")]
    word = ("faster" if all(u >= 1 + FASTER for u in up) else "slower" if all(u <= 1 - FASTER for u in up)
            else "about equal")
    padding = peer["padding"] / ours["padding"]
    return (f"ours {word} per real sub-word ({up[0]:.2f}x wall, {up[1]:.2f}x CPU) = padding {padding:.2f}x "
            f"x work per slot {up[0] / padding:.2f}x")


def _fewer_seeds_timed(task: str, recipe: str, mine: list[dict], theirs: list[dict], everyone: list[dict]) -> list[str]:
    """Lines under the speed table for a row timed on fewer of ours' seeds (``mine``, paired with the
    peer's ``theirs``) than ours ran (``everyone``): ours' rate on those seeds against its rate over all
    of them, and the verdict against the latter. The table pairs seeds so that both sides are timed
    alike; a seed that shared its core while timed (another job beside it) is then a confound of the
    row, and these lines put the number beside it."""
    if len(mine) == len(everyone):
        return []
    seeds = [r["seed"] for r in mine]
    lines = []
    for phase in ("train", "predict"):
        a, every, b = _pooled(mine, phase), _pooled(everyone, phase), _pooled(theirs, phase)
        lines.append(f"- {task} {recipe} {phase}: timed on ours' seed{'s' if len(seeds) > 1 else ''} "
                     f"{', '.join(map(str, seeds))} of {len(everyone)}: ours {_num(a['sub'], 0)} "
                     f"({_num(a['sub_cpu'], 0)}) real sub-words/s there, {_num(every['sub'], 0)} "
                     f"({_num(every['sub_cpu'], 0)}) over all {len(everyone)}; against the latter, "
                     + speed_verdict(every, b))
    return lines


def _num(v: float, digits: int = 2) -> str:
    return "n/a" if v is None or not np.isfinite(v) else f"{v:.{digits}f}"


def render(results: dict) -> str:
    """The markdown of docs/peers.md's second comparison, from a results file."""
    if not results["records"]:
        return ("Generated by `python bench/peers.py --render docs/peers.json`; do not edit by hand. No run of the "
                "second comparison has finished yet: docs/peers.json holds none.")
    records = [r for r in results["records"] if not r.get("error")]
    failed = [r for r in results["records"] if r.get("error")]
    ours = {(r["task"], r["seed"]): r for r in records if r["recipe"] == "ours"}
    peers = {}
    for r in records:
        if r["recipe"] != "ours":
            peers.setdefault((r["task"], r["recipe"]), []).append(r)
    order = [(t, rc) for t in METRICS for rc in sorted({rc for _, rc in peers}) if (t, rc) in peers]
    machines = sorted({r["machine"].split(", ", 1)[1] for r in results["records"] if r.get("machine")})
    sizes_seen = sorted({json.dumps(r["size"], sort_keys=True) for r in results["records"]})
    timed = [t for t in (as_number(r.get("seconds")) for r in results["records"]) if t is not None]
    compute = (f" The {len(timed)} of them that keep their time took {sum(timed) / 3600:.1f} hours of one-thread "
               "wall time (each side whole: loading, training, dev scoring, prediction)." if timed else "")
    out = [f"Generated by `python bench/peers.py --render docs/peers.json` from {len(results['records'])} runs; "
           "do not edit by hand." + compute, "", "Machines: " + "; ".join(machines) + ".", "",
           "Sizes: " + "; ".join(sizes_seen) + ".", "",
           "**Accuracy** (test; paired by seed; 95% t-interval of ours - peer; verdict by the rule above):", "",
           "| task | recipe | metric | seeds | mtl-heads | peer | ours - peer | 95% interval | verdict | epochs to best: ours, peer |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for task, recipe in order:
        metric = METRICS[task]
        pairs = [(ours[(task, p["seed"])], p) for p in sorted(peers[(task, recipe)], key=lambda r: r["seed"])
                 if (task, p["seed"]) in ours]
        if not pairs:
            continue
        a = [o["scores"][metric] for o, _ in pairs]
        b = [p["scores"][metric] for _, p in pairs]
        diffs = [x - y for x, y in zip(a, b)]
        mean, sd, low, high = _ci(diffs)
        spread = lambda v: f"{np.mean(v):.2f} ± {np.std(v, ddof=1):.2f}" if len(v) > 1 else f"{v[0]:.2f}"  # noqa: E731
        best = lambda side: f"{np.mean([r['best_epoch'] for r in side]):.1f}"  # noqa: E731
        if recipe.endswith(BY_LENGTH):  # a speed run: shown, not judged (its recipe's own row is)
            verdict = f"a speed run, not judged (the {recipe.removesuffix(BY_LENGTH)} row is)"
        else:
            missing = [s for s in seeds_asked(paired_differences(results, task, recipe))
                       if s not in {o["seed"] for o, _ in pairs}]
            verdict = accuracy_verdict(diffs) + (f"; to come: seed{'s' if len(missing) > 1 else ''} "
                                                 f"{', '.join(map(str, missing))}, which the rule asks" if missing else "")
        out.append(f"| {task} | {recipe} | {metric} | {len(pairs)} | {spread(a)} | {spread(b)} | {mean:+.2f}"
                   f"{f' ± {sd:.2f}' if len(diffs) > 1 else ''} | "
                   f"{f'{_num(low)} to {_num(high)}' if len(diffs) > 1 else '—'} | {verdict} | "
                   f"{best([o for o, _ in pairs])}, {best([p for _, p in pairs])} |")
    out += ["", "**Per seed** (test score, then the best dev epoch / the epochs run):", "",
            "| task | recipe | seed | mtl-heads | peer | ours - peer |", "| --- | --- | --- | --- | --- | --- |"]
    for task, recipe in order:
        for p in sorted(peers[(task, recipe)], key=lambda r: r["seed"]):
            o = ours.get((task, p["seed"]))
            if o is None:
                continue
            side = lambda r: f"{r['scores'][METRICS[task]]:.2f} ({r['best_epoch']}/{len(r['dev_curve'])})"  # noqa: E731
            out.append(f"| {task} | {recipe} | {p['seed']} | {side(o)} | {side(p)} | "
                       f"{o['scores'][METRICS[task]] - p['scores'][METRICS[task]]:+.2f} |")
    out += ["", "**Dev curves** (dev score after each epoch, mean over seeds; a side stops after "
            f"{PATIENCE} epochs without a better one):", ""]
    curves = [(f"{t} mtl-heads", [r for (task, _), r in ours.items() if task == t]) for t in METRICS] + \
        [(f"{t} {rc} {PEERS[t]}", peers[(t, rc)]) for t, rc in order]
    for name, runs in curves:
        if not runs:
            continue
        longest = max(len(r["dev_curve"]) for r in runs)
        means = [np.mean([r["dev_curve"][e] for r in runs if len(r["dev_curve"]) > e]) for e in range(longest)]
        out.append(f"- {name}: " + ", ".join(f"{v:.1f}" for v in means) + f" ({len(runs)} seed{'s' if len(runs) > 1 else ''})")
    out += ["", "**Speed** (all seeds pooled; sentences per second by the wall clock, per CPU-second in brackets; "
            "padding: sub-word slots per real sub-word; sub-words: real sub-words per second):", "",
            "| task | recipe | phase | mtl-heads sent/s | padding | sub-words/s | peer sent/s | padding | sub-words/s | "
            "verdict |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    fewer = []
    for task, recipe in order:  # the seeds both sides ran, so that both are timed alike
        theirs = sorted((r for r in peers[(task, recipe)] if (task, r["seed"]) in ours), key=lambda r: r["seed"])
        mine = [ours[(task, r["seed"])] for r in theirs]
        if not theirs:
            continue
        fewer += _fewer_seeds_timed(task, recipe, mine, theirs, [r for (t, _), r in sorted(ours.items()) if t == task])
        phases = [("train", "train", "train"), ("predict", "predict", "predict")]
        if any(np.isfinite(r["sorted_wall"]) for r in theirs):
            phases.append(("predict, peer sorted by length", "predict", "predict_sorted"))
        for label, mine_phase, their_phase in phases:
            a, b = _pooled(mine, mine_phase), _pooled(theirs, their_phase)
            cell = lambda s: (f"{_num(s['sent'], 1)} ({_num(s['sent_cpu'], 1)}) | {_num(s['padding'])} | "  # noqa: E731
                              f"{_num(s['sub'], 0)} ({_num(s['sub_cpu'], 0)})")
            out.append(f"| {task} | {recipe} | {label} | {cell(a)} | {cell(b)} | {speed_verdict(a, b)} |")
    if fewer:
        out += ["", "Rows timed on fewer seeds of ours than ours ran (ours' rate there and over all its seeds; "
                "wall clock, CPU clock in brackets):", ""] + fewer
    settings = {}
    for r in results["records"]:
        settings.setdefault((r["task"] if r["recipe"] != "ours" else "all", r["recipe"], r["system"]),
                            json.dumps(r["settings"], sort_keys=True))
    out += ["", "**Settings** each side ran with:", ""]
    out += [f"- {task} {recipe} {system}: `{text}`" for (task, recipe, system), text in sorted(settings.items())]
    notes = sorted({f"- {r['task']} {r['recipe']} seed {r['seed']} {r['system']}: {r['error'] or r['note']}"
                    for r in results["records"] if r.get("error") or r.get("note")})
    if notes:
        out += ["", "Notes:", ""] + notes
    if failed:
        out += ["", f"{len(failed)} runs failed and are left out (above)."]
    return "\n".join(out)

