"""The results file of bench/peers.py and its tables: the markdown of docs/peers.md's generated blocks.

The pairs (``PEERS``, each task's main metric ``METRICS``), the stopping rule (``CAP``, ``PATIENCE``),
round 3's recipe (``FULL``, ``OWN_EPOCHS``) and docs/peers.md's verdict rules (``MARGIN``, ``CLOSE``,
``FASTER``, ``RISING``) live here, read by the runs (bench/peers.py, bench/peers_sides.py) and by the
tables alike. Two blocks: :func:`render`, the tables of every comparison since the second, and
:func:`answer`, the opening of docs/peers.md (where the project stands, pair by pair). No torch:
rendering a results file (``python bench/peers.py --render docs/peers.json``) needs numpy and scipy only.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from scipy import stats

from mtl_heads.study.core import as_number

PEERS = {"dep": "supar BiaffineDependencyParser", "con": "supar CRFConstituencyParser",
         "pos": "HF AutoModelForTokenClassification + Trainer", "ner": "HF AutoModelForTokenClassification + Trainer"}
METRICS = {"dep": "las", "con": "f1", "pos": "accuracy", "ner": "f1"}
CAP, PATIENCE = 10, 2    # epochs at most; epochs without a better dev score before stopping
MARGIN = 0.5             # "equal within 0.5 points" (docs/peers.md)
CLOSE = 1.0              # seeds 4 and 5 too where the mean paired difference after 3 seeds is within this
FASTER = 0.10            # "faster" when the rate per real sub-word is this much above the other's, by both clocks
BY_LENGTH = "+by-length"  # a recipe's suffix for the careful-user speed runs (the Trainer's group_by_length
                          # training): the rule times them and does not judge their accuracy
FULL = "own-full"        # round 3: each peer's own recipe on the whole EWT splits, ours at its defaults beside it
OWN_EPOCHS = {"dep": 10, "con": 10, "pos": 3}  # round 3's cap: the peer recipe's epochs (supar's command, the Trainer)
OURS = "mtl-heads"       # our side's system name; its records' recipe is "ours" (rounds 2) or FULL (round 3)
NOT_JUDGED = {"peer": "recipe written for another data size: not judged"}  # rows shown, not judged (issue 51)
RISING = 0.2             # round 3: "still rising at the cap" when the mean dev score rose by more in the last epoch


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


def seeds_asked(diffs: dict[int, float], recipe: str = "equal") -> tuple[int, ...]:
    """The seeds docs/peers.md's rule asks of a pair and recipe, given its paired differences so far
    (``{seed: ours - peer}``): seeds 1 to 3, and for round 2's recipes 4 and 5 too once the mean difference
    over seeds 1 to 3 is within ``CLOSE`` points (decided on those three alone, so that later seeds cannot
    change it). Round 3 (``recipe`` ``FULL``) and the speed runs (``BY_LENGTH``) ask seeds 1 to 3 only."""
    if recipe == FULL or recipe.endswith(BY_LENGTH):
        return FIRST_SEEDS
    if all(seed in diffs for seed in FIRST_SEEDS) and abs(np.mean([diffs[s] for s in FIRST_SEEDS])) <= CLOSE:
        return FIRST_SEEDS + MORE_SEEDS
    return FIRST_SEEDS


def ours_recipe(recipe: str) -> str:
    """The recipe of our records that a peer's ``recipe`` pairs with: round 3's own (``FULL``: other data
    and cap), else ``"ours"`` (round 2: one run of ours, at its defaults, serves every recipe)."""
    return FULL if recipe == FULL else "ours"


def pairs(results: dict, task: str, recipe: str) -> list[tuple[dict, dict]]:
    """``(ours, peer)`` records of ``task`` at the peer's ``recipe``, paired by seed (both finished), by seed."""
    records = [r for r in results["records"] if not r.get("error") and r["task"] == task]
    ours = {r["seed"]: r for r in records if r["system"] == OURS and r["recipe"] == ours_recipe(recipe)}
    return [(ours[r["seed"]], r) for r in sorted(records, key=lambda r: r["seed"])
            if r["system"] != OURS and r["recipe"] == recipe and r["seed"] in ours]


def paired_differences(results: dict, task: str, recipe: str) -> dict[int, float]:
    """``{seed: ours - peer}`` of the task's main metric, over the seeds where both sides finished."""
    metric = METRICS[task]
    return {p["seed"]: o["scores"][metric] - p["scores"][metric] for o, p in pairs(results, task, recipe)}


def record_key(record: dict) -> str:
    """``task/recipe/seed/system``: a record's name in the results file's ``updates`` section."""
    return f"{record['task']}/{record['recipe']}/{record['seed']}/{record['system']}"


def updates_of(results: dict, record: dict) -> int | None:
    """The optimiser updates a side made: its record's count (kept since round 3), else the count bench/peers.py
    ``--count-updates`` worked out for an older record from its data and batch settings (the file's
    ``updates`` section); None where neither is."""
    if record.get("updates") is not None:
        return record["updates"]
    return results.get("updates", {}).get(record_key(record))


def cap_of(record: dict) -> int | None:
    """The epochs a side could run at most (its settings' ``cap``, supar's ``epochs``)."""
    settings = record.get("settings") or {}
    return settings.get("cap", settings.get("epochs"))


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


UNITS = {"sentence": ("sent", "sent_cpu"), "real sub-word": ("sub", "sub_cpu")}  # rates of _pooled, wall and CPU


def speed_ratios(ours: dict, peer: dict, unit: str = "real sub-word") -> tuple[list[float], str]:
    """Ours' rates over the peer's (wall clock, CPU clock) per ``unit`` (a key of ``UNITS``: ``_pooled``'s
    rates) and the rule's word for them: faster / slower when at least ``FASTER`` apart by both clocks,
    else about equal (docs/peers.md)."""
    up = [ours[k] / peer[k] for k in UNITS[unit]]
    word = ("faster" if all(u >= 1 + FASTER for u in up) else "slower" if all(u <= 1 - FASTER for u in up)
            else "about equal")
    return up, word


def speed_verdict(ours: dict, peer: dict) -> str:
    """Faster / slower / about equal per real sub-word (by both clocks: the rule of docs/peers.md), and
    what the gap is made of: the ratio of rates per sentence is the padding quotient (the peer's sub-word
    slots per real sub-word over ours) times the ratio of rates per slot (the work each side does per
    sub-word it runs: encoder, decoder, decoding)."""
    up, word = speed_ratios(ours, peer)
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


def _spread(values: list[float]) -> str:
    return f"{np.mean(values):.2f} ± {np.std(values, ddof=1):.2f}" if len(values) > 1 else f"{values[0]:.2f}"


def _mean_updates(results: dict, side: list[dict]) -> str:
    counts = [updates_of(results, r) for r in side]
    return "n/a" if not counts or None in counts else f"{np.mean(counts):.0f}"


def rising(side: list[dict]) -> float | None:
    """Round 3's "still rising at the cap" (docs/peers.md): the mean dev score's rise in the last epoch when
    every seed of the side (its records) had its best dev epoch at its last, and ran alike; else None."""
    if not side or any(r["best_epoch"] != len(r["dev_curve"]) or len(r["dev_curve"]) < 2 for r in side):
        return None
    if len({len(r["dev_curve"]) for r in side}) > 1:
        return None
    rise = float(np.mean([r["dev_curve"][-1] - r["dev_curve"][-2] for r in side]))
    return rise if rise > RISING else None


def seeds_to_come(results: dict, task: str, recipe: str, both: list[tuple[dict, dict]]) -> list[int]:
    """The seeds the rule asks of a pair and recipe that ``both`` (its finished pairs) does not hold yet."""
    return [s for s in seeds_asked(paired_differences(results, task, recipe), recipe)
            if s not in {o["seed"] for o, _ in both}]


def _verdict(results: dict, task: str, recipe: str, both: list[tuple[dict, dict]]) -> str:
    """The accuracy table's verdict cell: round 2's rule, what is not judged and why, round 3's flags."""
    if recipe.endswith(BY_LENGTH):  # a speed run: shown, not judged (its recipe's own row is)
        return f"a speed run, not judged (the {recipe.removesuffix(BY_LENGTH)} row is)"
    if recipe in NOT_JUDGED:
        return NOT_JUDGED[recipe]
    diffs = [o["scores"][METRICS[task]] - p["scores"][METRICS[task]] for o, p in both]
    missing = seeds_to_come(results, task, recipe, both)
    verdict = accuracy_verdict(diffs) + (f"; to come: seed{'s' if len(missing) > 1 else ''} "
                                         f"{', '.join(map(str, missing))}, which the rule asks" if missing else "")
    if recipe == FULL:
        for name, side in (("ours", [o for o, _ in both]), ("peer", [p for _, p in both])):
            rise = rising(side)
            if rise is not None:
                verdict += f"; {name} still rising at the cap (+{rise:.2f} in its last epoch)"
    return verdict


def render(results: dict) -> str:
    """The markdown of docs/peers.md's tables (the second comparison and round 3), from a results file."""
    if not results["records"]:
        return ("Generated by `python bench/peers.py --render docs/peers.json`; do not edit by hand. No run of the "
                "second comparison has finished yet: docs/peers.json holds none.")
    records = [r for r in results["records"] if not r.get("error")]
    failed = [r for r in results["records"] if r.get("error")]
    recipes = sorted({r["recipe"] for r in records if r["system"] != OURS})
    order = [(t, rc) for t in METRICS for rc in recipes if pairs(results, t, rc)]
    machines = sorted({r["machine"].split(", ", 1)[1] for r in results["records"] if r.get("machine")})
    sizes_seen = sorted({json.dumps(r["size"], sort_keys=True) for r in results["records"]})
    timed = [t for t in (as_number(r.get("seconds")) for r in results["records"]) if t is not None]
    compute = (f" The {len(timed)} of them that keep their time took {sum(timed) / 3600:.1f} hours of one-thread "
               "wall time (each side whole: loading, training, dev scoring, prediction)." if timed else "")
    out = [f"Generated by `python bench/peers.py --render docs/peers.json` from {len(results['records'])} runs; "
           "do not edit by hand." + compute, "", "Machines: " + "; ".join(machines) + ".", "",
           "Sizes: " + "; ".join(sizes_seen) + ".", "",
           "**Accuracy** (test; paired by seed; 95% t-interval of ours - peer; verdict by the rule above; "
           "optimiser updates: mean over the seeds):", "",
           "| task | recipe | metric | seeds | mtl-heads | peer | ours - peer | 95% interval | verdict | "
           "epochs to best: ours, peer | updates: ours, peer |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for task, recipe in order:
        both = pairs(results, task, recipe)
        a = [o["scores"][METRICS[task]] for o, _ in both]
        b = [p["scores"][METRICS[task]] for _, p in both]
        diffs = [x - y for x, y in zip(a, b)]
        mean, sd, low, high = _ci(diffs)
        best = lambda side: f"{np.mean([r['best_epoch'] for r in side]):.1f}"  # noqa: E731
        mine, theirs = [o for o, _ in both], [p for _, p in both]
        out.append(f"| {task} | {recipe} | {METRICS[task]} | {len(both)} | {_spread(a)} | {_spread(b)} | {mean:+.2f}"
                   f"{f' ± {sd:.2f}' if len(diffs) > 1 else ''} | "
                   f"{f'{_num(low)} to {_num(high)}' if len(diffs) > 1 else '—'} | "
                   f"{_verdict(results, task, recipe, both)} | {best(mine)}, {best(theirs)} | "
                   f"{_mean_updates(results, mine)}, {_mean_updates(results, theirs)} |")
    out += ["", "**Per seed** (test score, then the best dev epoch / the epochs run):", "",
            "| task | recipe | seed | mtl-heads | peer | ours - peer |", "| --- | --- | --- | --- | --- | --- |"]
    for task, recipe in order:
        for o, p in pairs(results, task, recipe):
            side = lambda r: f"{r['scores'][METRICS[task]]:.2f} ({r['best_epoch']}/{len(r['dev_curve'])})"  # noqa: E731
            out.append(f"| {task} | {recipe} | {p['seed']} | {side(o)} | {side(p)} | "
                       f"{o['scores'][METRICS[task]] - p['scores'][METRICS[task]]:+.2f} |")
    out += ["", "**Dev curves** (dev score after each epoch, mean over seeds; in round 2 a side stops after "
            f"{PATIENCE} epochs without a better one):", ""]
    ours_groups = sorted({(r["task"], r["recipe"]) for r in records if r["system"] == OURS},
                         key=lambda k: (list(METRICS).index(k[0]), k[1] != "ours", k[1]))
    curves = [(f"{t} {'' if rc == 'ours' else rc + ' '}mtl-heads",
               [r for r in records if r["system"] == OURS and (r["task"], r["recipe"]) == (t, rc)])
              for t, rc in ours_groups] + \
        [(f"{t} {rc} {PEERS[t]}", [p for _, p in pairs(results, t, rc)]) for t, rc in order]
    for name, runs in curves:
        longest = max(len(r["dev_curve"]) for r in runs)
        means = [np.mean([r["dev_curve"][e] for r in runs if len(r["dev_curve"]) > e]) for e in range(longest)]
        out.append(f"- {name}: " + ", ".join(f"{v:.1f}" for v in means) + f" ({len(runs)} seed{'s' if len(runs) > 1 else ''})")
    out += ["", "**Speed** (all seeds pooled; sentences per second by the wall clock, per CPU-second in brackets; "
            "padding: sub-word slots per real sub-word; sub-words: real sub-words per second):", "",
            "| task | recipe | phase | mtl-heads sent/s | padding | sub-words/s | peer sent/s | padding | sub-words/s | "
            "verdict |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    fewer = []
    for task, recipe in order:  # the seeds both sides ran, so that both are timed alike
        both = pairs(results, task, recipe)
        mine, theirs = [o for o, _ in both], [p for _, p in both]
        everyone = [r for r in records if r["system"] == OURS and r["task"] == task and r["recipe"] == ours_recipe(recipe)]
        fewer += _fewer_seeds_timed(task, recipe, mine, theirs, sorted(everyone, key=lambda r: r["seed"]))
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


# ----------------------------------------------------------------------------- the answer (docs/peers.md's opening)
PAIR_NAMES = {"dep": "supar's biaffine parser", "con": "supar's CRF parser", "pos": "a Hugging Face `Trainer` fine-tune",
              "ner": "a Hugging Face `Trainer` fine-tune"}
PEER_SHORT = {"dep": "supar", "con": "supar", "pos": "the Trainer", "ner": "the Trainer"}
METRIC_NAMES = {"las": "LAS", "f1": "F1", "accuracy": "accuracy"}


def _made_of(peer: str, phases: list[tuple[dict, dict]]) -> str:
    """What ours' lead per real sub-word is made of, per phase (training, prediction: ``(ours, peer)`` pooled
    rates): the peer's padding over ours times ours' rate per sub-word slot over the peer's (by the wall clock,
    as the speed table splits it), and whether the padding is all of the lead, most of it or less."""
    parts, shares = [], []
    for a, b in phases:
        up, padding = a["sub"] / b["sub"], b["padding"] / a["padding"]
        parts.append(f"{padding:.2f}x x {up / padding:.2f}x")
        shares.append(1.0 if up <= 1 or padding >= up else math.log(max(padding, 1.0)) / math.log(up))
    size = "all of it" if min(shares) >= 1 else "most of it" if min(shares) > 0.5 else "not most of it"
    return (f"Per real sub-word, ours' lead = {peer}'s padding over ours x ours' rate per sub-word slot: training "
            f"{parts[0]}, prediction {parts[1]}; {size} {peer}'s padding")


def _stopped(record: dict) -> bool:
    cap = cap_of(record)
    return cap is not None and len(record["dev_curve"]) < cap


def _interval(diffs: list[float]) -> str:
    mean, _, low, high = _ci(diffs)
    return f"{mean:+.2f} (95% {low:.2f} to {high:.2f})" if len(diffs) > 1 else f"{mean:+.2f}"


def _seeds(seeds: list[int]) -> str:
    return f"seed{'s' if len(seeds) > 1 else ''} " + (", ".join(map(str, seeds[:-1])) + " and " if len(seeds) > 1
                                                      else "") + str(seeds[-1])


def early_stops(task: str, both: list[tuple[dict, dict]]) -> str:
    """What the early stops of a pair's seeds do to its verdict (docs/peers.md's opening): each side that
    stopped before its cap; the verdict over the seeds where neither did, when it differs; and the seeds
    where both sides stopped after as many epochs (where neither trained longer)."""
    metric = METRICS[task]
    diff = lambda o, p: o["scores"][metric] - p["scores"][metric]  # noqa: E731
    stops = [f"{'ours' if side is o else PEER_SHORT[task]} on seed {o['seed']} ({len(side['dev_curve'])} of "
             f"{cap_of(side)} epochs)" for o, p in both for side in (o, p) if _stopped(side)]
    if not stops:
        return ""
    text = f" Early stops (the shared patience of {PATIENCE}): " + ", ".join(stops) + "."
    full = [diff(o, p) for o, p in both if not _stopped(o) and not _stopped(p)]
    whole = accuracy_verdict([diff(o, p) for o, p in both]).split(" (")[0]
    if len(full) > 1 and accuracy_verdict(full).split(" (")[0] != whole:
        text += (f" Over the {len(full)} seeds where neither side stopped early it reads "
                 f"*{accuracy_verdict(full).split(' (')[0]}*, {_interval(full)}: the verdict turns on "
                 f"{'that early stop' if len(stops) == 1 else 'those early stops'}.")
    same = [(o, p) for o, p in both if _stopped(o) and len(o["dev_curve"]) == len(p["dev_curve"])]
    for o, p in same:
        d = diff(o, p)
        text += (f" On seed {o['seed']} both sides stopped after {len(o['dev_curve'])} epochs, and ours is "
                 f"{abs(d):.2f} {'lower' if d < 0 else 'higher'}.")
    return text


def _phase(label: str, a: dict, b: dict) -> tuple[str, str]:
    """``label`` and the speed words of ours (``a``) against the peer (``b``), per sentence and per real sub-word,
    with the ratios (wall clock, CPU clock); and the word per real sub-word (the rule's)."""
    (s, sw), (w, ww) = speed_ratios(a, b, "sentence"), speed_ratios(a, b)
    head = sw if sw == ww else f"{sw} per sentence, {ww} per real sub-word"
    return (f"{label} {head} ({s[0]:.2f}x, {s[1]:.2f}x a sentence; {w[0]:.2f}x, {w[1]:.2f}x a real sub-word)", ww)


def _speed_pick(words: list[str], peer: str) -> str:
    """Which side to pick for speed from the rule's words of its phases (training, prediction)."""
    if all(w == "faster" for w in words):
        return "mtl-heads"
    if "slower" in words and "faster" not in words:
        return peer
    if "faster" in words and "slower" not in words:
        return "mtl-heads, by a little"
    return "either" if all(w == "about equal" for w in words) else "neither: each leads in one phase"


def _accuracy_pick(verdict: str, below: int, n: int, peer: str) -> str:
    if verdict == "better":
        return "mtl-heads"
    if verdict == "worse":
        return peer
    if verdict.startswith("equal"):
        return "either (a tie)"
    return (f"{peer}, not settled (ours below on {below} of {n} seeds)" if 2 * below > n
            else f"neither, not settled (ours below on {below} of {n} seeds)")


def answer(results: dict) -> str:
    """docs/peers.md's opening, generated from the results file: for each pair, where ours stands at equal knobs
    (the verdict, the mean difference, the seeds ours is below on, what early stops do to it), its speed against
    the peer as it runs by default and, for the Trainer, as a careful user runs it (training grouped by length,
    prediction sorted by length), per sentence beside per real sub-word; round 3, each side's own recipe on the
    whole training split (:func:`_round3`); what to pick for what; the rows not judged."""
    lead = []
    lines = []
    picks = []
    round3, round3_picks = _round3(results)
    for task in METRICS:
        both = pairs(results, task, "equal")
        if not both:
            continue
        metric = METRICS[task]
        diffs = [o["scores"][metric] - p["scores"][metric] for o, p in both]
        verdict = accuracy_verdict(diffs).split(" (")[0]
        below = sum(d < 0 for d in diffs)
        if verdict == "better":
            lead.append(task.upper())
        peer = PEER_SHORT[task]
        mine, theirs = [o for o, _ in both], [p for _, p in both]
        train, train_word = _phase("training", _pooled(mine, "train"), _pooled(theirs, "train"))
        predict, predict_word = _phase("prediction", _pooled(mine, "predict"), _pooled(theirs, "predict"))
        made = _made_of(peer, [(_pooled(mine, ph), _pooled(theirs, ph)) for ph in ("train", "predict")])
        if task in ("dep", "con"):
            speed = f"as it runs (its length buckets), {train}; {predict}. {made}"
            careful_words = [train_word, predict_word]
        else:
            everyone = [r for r in results["records"] if not r.get("error") and r["system"] == OURS
                        and r["task"] == task and r["recipe"] == "ours"]
            grouped = [p for _, p in pairs(results, task, "equal" + BY_LENGTH)]
            careful = []
            careful_words = []
            if grouped:
                text, word = _phase("training", _pooled(everyone, "train"), _pooled(grouped, "train"))
                seeds = [r["seed"] for r in grouped]
                paired = [r for r in everyone if r["seed"] in seeds]
                up, alone = speed_ratios(_pooled(paired, "train"), _pooled(grouped, "train"))
                careful.append(f"{text}, its {_seeds(seeds)} grouped by length against ours over its {len(everyone)} "
                               f"seeds" + (f" (against ours' {_seeds(seeds)} alone: {alone}, "
                                            f"{up[0]:.2f}x, {up[1]:.2f}x a real sub-word)" if alone != word else ""))
                careful_words.append(word)
            if any(np.isfinite(r["sorted_wall"]) for r in theirs):
                text, word = _phase("prediction", _pooled(mine, "predict"), _pooled(theirs, "predict_sorted"))
                careful.append(text + ", its test sentences sorted by length (and tokenised before its clock starts)")
                careful_words.append(word)
            speed = (f"as it runs by default (random training batches, prediction in input order), {train}; {predict}. "
                     f"{made}. As a careful user runs it, {'; '.join(careful)}")
        spread = (" supar's batch order is seeded by the epoch, not by the seed, so its seeds differ in "
                  "initialisation and dropout only and its spread is understated." if task in ("dep", "con") else "")
        lines.append(f"- **{task.upper()}** against {PAIR_NAMES[task]}: *{verdict}*, {_interval(diffs)} "
                     f"{METRIC_NAMES[metric]} "
                     f"(ours - peer), ours below on {below} of {len(diffs)} seeds.{early_stops(task, both)}{spread} "
                     f"Speed, ours against {peer} {speed}.")
        own = f", {round3_picks[task]}" if task in round3_picks else ""
        picks.append(f"{task.upper()}: for accuracy, {_accuracy_pick(verdict, below, len(diffs), peer)} at equal knobs"
                     f"{own}; for speed on a CPU, "
                     f"{_speed_pick(careful_words, peer + (' run carefully' if task in ('pos', 'ner') else ''))}")
    stands = (f"mtl-heads leads on {', '.join(lead)}" if lead else "mtl-heads leads on no pair")
    trained = sorted({r["size"]["train"] for task in METRICS for o, p in pairs(results, task, "equal") for r in (o, p)})
    not_judged = []
    for task in METRICS:
        both = pairs(results, task, "peer")
        if both:
            mine = _mean_updates(results, [o for o, _ in both])
            theirs = _mean_updates(results, [p for _, p in both])
            not_judged.append(f"{task.upper()} {theirs} against ours' {mine}")
    out = [f"Generated by `python bench/peers.py --answer docs/peers.json` from the records; do not edit by hand. "
           f"Ratios are ours over the peer's rate (wall clock, CPU clock); *faster* or *slower* when {FASTER:.0%} "
           "apart by both clocks.", "",
           f"**At equal knobs** (the same steps, learning rates, warm-up and clipping on both sides, "
           f"{' or '.join(map(str, trained))} EWT training sentences, to convergence under a patience of {PATIENCE} and a cap of {CAP} epochs: the "
           f"comparison of the implementations), {stands}:", ""] + lines + round3 + [
           "", "**What to pick**: " + "; ".join(picks) + ". This bench compares one task at a time: what mtl-heads "
           "is for, one encoder shared by several tasks and its attention heads pruned, has no peer here.", "",
           f"**Not judged**: the peers' own recipes on {' or '.join(map(str, trained))} sentences (the rows *peer*), "
           "written for other data sizes; "
           "their mean optimiser updates: " + "; ".join(not_judged) + "."]
    return "\n".join(out)


def _round3(results: dict) -> tuple[list[str], dict[str, str]]:
    """The opening's round-3 paragraph (each side's own recipe on the whole EWT splits): per task of its rule
    with both sides of a seed, the verdict, the mean difference, the seeds ours is below on, both sides' updates
    and the speed against the peer as its recipe runs (for the Trainer, also its test sentences sorted by
    length); the tasks without a pair and the runs waiting for their other side. Also ``{task: accuracy pick}``
    where the verdict is settled."""
    full_pairs = {t: pairs(results, t, FULL) for t in OWN_EPOCHS}
    paired = {(o["task"], o["seed"]) for both in full_pairs.values() for o, _ in both}
    lone = [f"{r['task'].upper()} seed {r['seed']} ({'ours' if r['system'] == OURS else 'the peer'})"
            for r in results["records"] if r["recipe"] == FULL and not r.get("error")
            and (r["task"], r["seed"]) not in paired]
    lines, picks = [], {}
    for task, both in full_pairs.items():
        if not both:
            continue
        metric = METRICS[task]
        diffs = [o["scores"][metric] - p["scores"][metric] for o, p in both]
        below = sum(d < 0 for d in diffs)
        mine, theirs = [o for o, _ in both], [p for _, p in both]
        peer = PEER_SHORT[task]
        speed = (f"as its recipe runs, {_phase('training', _pooled(mine, 'train'), _pooled(theirs, 'train'))[0]}; "
                 f"{_phase('prediction', _pooled(mine, 'predict'), _pooled(theirs, 'predict'))[0]}")
        if any(np.isfinite(r["sorted_wall"]) for r in theirs):
            speed += (f". Against {peer} predicting its test sentences sorted by length (what a careful user does), "
                      f"{_phase('prediction', _pooled(mine, 'predict'), _pooled(theirs, 'predict_sorted'))[0]}")
        lines.append(f"- **{task.upper()}** against {PAIR_NAMES[task]} at its recipe: "
                     f"*{_verdict(results, task, FULL, both)}*, {_interval(diffs)} {METRIC_NAMES[metric]} (ours - peer) "
                     f"over {_seeds([o['seed'] for o in mine])}, ours below on {below} of {len(diffs)}; optimiser "
                     f"updates, ours {_mean_updates(results, mine)} against {_mean_updates(results, theirs)}. "
                     f"Speed, ours against {peer} {speed}.")
        verdict = accuracy_verdict(diffs).split(" (")[0]
        settled = verdict in ("better", "worse") or verdict.startswith("equal")
        if settled and not seeds_to_come(results, task, FULL, both):
            picks[task] = f"{_accuracy_pick(verdict, below, len(diffs), peer)} at each side's own recipe"
    missing = [t.upper() for t, both in full_pairs.items() if not both]
    waiting = f"Runs waiting for their other side: {', '.join(lone)}." if lone else ""
    rule = ("the peers' documented recipes, ours at its defaults for as many epochs; its rule below, committed before "
            "its runs")
    if not lines:
        return ["", f"**Round 3, each side's own recipe on the whole EWT training split** ({rule}), has no pair of "
                    f"runs yet." + (" " + waiting if waiting else "")], picks
    tail = ([f"No pair yet: {', '.join(missing)}."] if missing else []) + ([waiting] if waiting else [])
    return ["", f"**At each side's own recipe on the whole EWT training split** (round 3: {rule}):", ""] + lines + (
        ["", " ".join(tail)] if tail else []), picks
