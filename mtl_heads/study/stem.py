"""Claim 3: which heads survive in every task that pruned (the stem cells), more of them than chance
keeps, and are they the pretrained encoder's best probe heads? (:data:`VERDICT_RULES` ``stem``).

:func:`compute_stem` computes it as data (its tests, verdict and :class:`StemFacts`); :func:`words_stem`
writes its English from them; :func:`stem` does both."""
from __future__ import annotations

from dataclasses import dataclass, field

from mtl_heads.study.core import (REGIME_NAMES, REGIMES, Claim, Study, Test, cannot_reach, heads_text, majority,
                                  slot, unreachable)
from mtl_heads.study.heads import Unpruned, gate_runs, regime_gates, stem_table, stricter, unpruned, unpruned_text
from mtl_heads.gates.survivors import (chance_stem_cells, chance_stem_cells_by_layer, kept_by_layer,
                                       stem_cells_vs_probes, stem_count_layer_p, stem_count_p, stem_settings)
from mtl_heads.reports.significance import format_p

__all__ = ["StemProbe", "StemRegime", "StemFacts", "compute_stem", "words_stem", "stem"]


@dataclass
class StemProbe:
    """One probe of the pretrained encoder held against a regime's stem cells: ``key`` (its test's) and
    ``best_head`` (the probe's best head)."""

    key: str
    best_head: str


@dataclass
class StemRegime:
    """One regime with two single-task settings or more: ``kind``, ``left_out`` (those that did not prune),
    ``tested`` (False when fewer than two pruned: nothing tested), and where tested: ``settings`` (the names
    of those that pruned), ``kept`` (the heads each keeps), ``size`` (the heads of the grid), ``cells`` (the
    stem cells), ``every`` (those kept in every seed), ``count_key`` (the count's test), ``probes`` (those
    held against the stem cells; none when every head is one, ``all_kept``) and ``hits`` (how many of them
    rank the stem cells significantly high)."""

    kind: str
    left_out: list[Unpruned] = field(default_factory=list)
    tested: bool = False
    settings: list[str] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)
    size: int = 0
    cells: list[str] = field(default_factory=list)
    every: list[str] = field(default_factory=list)
    count_key: str = ""
    probes: list[StemProbe] = field(default_factory=list)
    hits: int = 0

    @property
    def all_kept(self) -> bool:
        return len(self.cells) == self.size


@dataclass
class StemFacts:
    """What claim 3 found beside its tests: ``regimes`` (each with two single-task settings or more, in
    :data:`REGIMES` order; the first tested decides), ``pretrained`` (the study has a probe report of the
    pretrained encoder)."""

    regimes: list[StemRegime] = field(default_factory=list)
    pretrained: bool = False

    @property
    def tested(self) -> list[StemRegime]:
        return [r for r in self.regimes if r.tested]


def compute_stem(study: Study) -> Claim:
    """Claim 3 as data. Per regime, a test of the stem cells' count (``<regime name> count``: ``what`` holds
    ``regime``, ``tasks`` (the settings that pruned, by task id), ``statistic`` ``stem cell count`` and
    ``heads``; ``value`` is the count) and one per probe of the pretrained encoder (``<regime name> POS
    probe``: ``probe`` and ``statistic`` ``mean percentile``, the stem cells' mean percentile among the
    probe's heads). Its facts: :class:`StemFacts`."""
    pretrained = [r for r in study.reports if r.meta.get("model_kind") != "run"]
    facts = StemFacts(pretrained=bool(pretrained))
    claim = Claim("stem", rule=study.rules.verdict_rules["stem"], rules=study.rules, facts=facts)
    for kind in REGIMES:
        gates = regime_gates(study, kind)
        table = stem_table(gates) if len(gates) >= 2 else None
        if table is None:
            if len(gates) >= 2:
                facts.regimes.append(StemRegime(kind, unpruned(gates, gates)))
            continue
        names = stem_settings(table)
        if len(names) < 2:
            continue
        found = StemRegime(kind, unpruned(gates, gates), True, names, [int(table[f"kept in {n}"].sum()) for n in names],
                           len(table), list(table.loc[table["stem cell"], "name"]),
                           list(table.loc[table["stem cell"] & table["every run"], "name"]),
                           f"{REGIME_NAMES[kind]} count")
        facts.regimes.append(found)
        block = max(g.block for g in gates.values())
        by_layer = kept_by_layer(table)  # [settings, layers]
        heads = int(table["head"].max()) + 1
        rules = study.rules
        p_global = stem_count_p(found.kept, found.size, len(found.cells), rules.shuffles, rules.seed, block=block)
        p_layer = stem_count_layer_p(by_layer, heads, len(found.cells), rules.shuffles, rules.seed, block=block)
        runs = gate_runs(study, gates, names)
        claim.add(Test(found.count_key, max(p_global, p_layer), floor=rules.floor, value=len(found.cells), runs=runs,
                       draws=rules.shuffles,
                       what={"regime": kind, "tasks": [gates[n].task for n in names], "statistic": "stem cell count",
                             "heads": found.cells},
                       numbers={"chance": chance_stem_cells(found.kept, found.size), "p_global": p_global,
                                "chance_within_layers": chance_stem_cells_by_layer(by_layer, heads),
                                "p_layer": p_layer, "every_seed": len(found.every)}))
        if found.cells and not found.all_kept and pretrained:
            ranks = stem_cells_vs_probes(table, pretrained[:1], rules.shuffles, rules.seed, block=block)
            for r in ranks.to_dict("records"):
                if r.get("note"):
                    continue
                found.probes.append(StemProbe(f"{REGIME_NAMES[kind]} {r['probe'].upper()} probe", r["best head"]))
                claim.add(Test(found.probes[-1].key, stricter(r), floor=rules.floor, value=r["mean percentile"],
                               runs=runs, draws=rules.shuffles,
                               what={"regime": kind, "probe": r["probe"], "statistic": "mean percentile"},
                               numbers={"null_mean": r["null mean"], "p_global": r["p"],
                                        "layer_null_mean": r["layer null mean"], "p_layer": r["layer p"]}))
    claim.adjust()
    for found in facts.tested:
        found.hits = sum(claim.significant(p.key) for p in found.probes)
    if facts.tested:  # the first regime present decides (DP first)
        first = facts.tested[0]
        count = claim.significant(first.count_key)
        claim.verdict = ("" if cannot_reach(claim, [first.count_key]) else
                         "yes" if count and majority(first.hits, len(first.probes)) else "partly" if count else "no")
    return claim


# --- the words ----------------------------------------------------------------------------------------
def words_stem(claim: Claim) -> Claim:
    """Claim 3's question, answer, lines (per regime its stem cells' count, then one per probe) and notes,
    written from its tests and facts."""
    facts: StemFacts = claim.facts
    claim.question = ("Which heads survive in every task (stem cells), and are they the pretrained encoder's best "
                      "probe heads?")
    claim.paper = ("a set of heads survives in every task and seed (the stem cells), and they are heads that already "
                   "probe well before fine-tuning")
    answers = []
    for found in facts.regimes:
        name = REGIME_NAMES[found.kind]
        if not found.tested:
            claim.notes.append(f"{name}: fewer than two single-task settings that pruned "
                               f"({unpruned_text(found.left_out)})")
            continue
        count = claim.tests[found.count_key]
        numbers, left_out = count.numbers, unpruned_text(found.left_out)
        claim.lines.append(
            f"{name}: {len(found.cells)} heads kept in all {len(found.settings)} tasks that pruned "
            f"({', '.join(found.settings)}; heads kept {', '.join(map(str, found.kept))} of {found.size})"
            + (f"; left out: {left_out}" if left_out else "")
            + f"; chance {numbers['chance']:.1f} (p {format_p(numbers['p_global'])}), within layers "
            f"{numbers['chance_within_layers']:.1f} (p {format_p(numbers['p_layer'])}); the stricter: "
            f"{slot(count.key)}; {len(found.every)} of them in every seed: {heads_text(found.every)}"
            + (f"; in most seeds only: {heads_text([h for h in found.cells if h not in found.every])}"
               if len(found.every) < len(found.cells) else ""))
        if found.all_kept:
            claim.notes.append(f"{name}: every head survives in every task, so there is nothing to hold against the "
                               "probe heads")
        for probe in found.probes:
            test = claim.tests[probe.key]
            n = test.numbers
            claim.lines.append(
                f"{name}, stem cells among the pretrained encoder's {test.what['probe'].upper()} probe heads: mean "
                f"percentile {test.value:.1f} (random sets of {len(found.cells)}: mean {n['null_mean']:.1f}, p "
                f"{format_p(n['p_global'])}; matched per layer: mean {n['layer_null_mean']:.1f}, p "
                f"{format_p(n['p_layer'])}; the stricter: {slot(probe.key)}); best head {probe.best_head}")
        answers.append(f"{name}: count above both chances {'yes' if claim.significant(found.count_key) else 'no'}, "
                       f"best probe heads for {found.hits} of {len(found.probes)} probes")
        blocked = unreachable(claim, [found.count_key]) if found is facts.tested[0] else ""
        if blocked:
            answers[-1] += f" ({blocked})"
    if not facts.pretrained:
        claim.notes.append("no probe report of the pretrained encoder: stem cells not held against probe heads")
    claim.answer = "; ".join(answers) if answers else "cannot be tested: no regime with two single-task settings that pruned"
    return claim


def stem(study: Study) -> Claim:
    """Claim 3, computed (:func:`compute_stem`) and written (:func:`words_stem`)."""
    return words_stem(compute_stem(study))
