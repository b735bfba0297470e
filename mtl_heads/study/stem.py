"""Claim 3: which heads survive in every task that pruned (the stem cells), more of them than chance
keeps, and are they the pretrained encoder's best probe heads? (:data:`VERDICT_RULES` ``stem``)."""
from __future__ import annotations

from mtl_heads.study.core import REGIME_NAMES, REGIMES, Claim, Study, Test, heads_text, majority, unreachable
from mtl_heads.study.heads import gate_runs, not_pruned, regime_gates, stem_table, stricter
from mtl_heads.study.rules import CLAIM_SHUFFLES, FLOOR, VERDICT_RULES
from mtl_heads.reports.gates.survivors import (chance_stem_cells, chance_stem_cells_by_layer, kept_by_layer,
                                               stem_cells_vs_probes, stem_count_layer_p, stem_count_p, stem_settings)
from mtl_heads.reports.significance import format_p

__all__ = ["stem"]


def stem(study: Study) -> Claim:
    """Claim 3. Per regime, a test of the stem cells' count (``<regime name> count``: ``what`` holds
    ``regime``, ``tasks`` (the settings that pruned, by task id), ``statistic`` ``stem cell count`` and
    ``heads``; ``value`` is the count) and one per probe of the pretrained encoder (``<regime name> POS
    probe``: ``probe`` and ``statistic`` ``mean percentile``, the stem cells' mean percentile among the
    probe's heads)."""
    claim = Claim("stem", "Which heads survive in every task (stem cells), and are they the pretrained encoder's best probe "
                  "heads?", "a set of heads survives in every task and seed (the stem cells), and they are heads that "
                  "already probe well before fine-tuning", VERDICT_RULES["stem"])
    pretrained = [r for r in study.reports if r.meta.get("model_kind") != "run"]
    found = {}  # regime -> (count key, [probe keys])
    for kind in REGIMES:
        gates = regime_gates(study, kind)
        table = stem_table(gates) if len(gates) >= 2 else None
        if table is None:
            if len(gates) >= 2:
                claim.notes.append(f"{REGIME_NAMES[kind]}: fewer than two single-task settings that pruned "
                                   f"({not_pruned(gates, gates)})")
            continue
        names = stem_settings(table)
        if len(names) < 2:
            continue
        block = max(g.block for g in gates.values())
        kept = [int(table[f"kept in {n}"].sum()) for n in names]
        by_layer = kept_by_layer(table)  # [settings, layers]
        heads = int(table["head"].max()) + 1
        cells = list(table.loc[table["stem cell"], "name"])
        every = list(table.loc[table["stem cell"] & table["every run"], "name"])
        p_global = stem_count_p(kept, len(table), len(cells), CLAIM_SHUFFLES, block=block)
        p_layer = stem_count_layer_p(by_layer, heads, len(cells), CLAIM_SHUFFLES, block=block)
        count_key = f"{REGIME_NAMES[kind]} count"
        runs = gate_runs(study, gates, names)
        marker = claim.add(Test(count_key, max(p_global, p_layer), floor=FLOOR, value=len(cells), runs=runs,
                            what={"regime": kind, "tasks": [gates[n].task for n in names], "statistic": "stem cell count", "heads": cells},
                            numbers={"chance": chance_stem_cells(kept, len(table)), "p_global": p_global,
                                     "chance_within_layers": chance_stem_cells_by_layer(by_layer, heads),
                                     "p_layer": p_layer, "every_seed": len(every)}))
        left_out = not_pruned(gates, gates)
        claim.lines.append(
            f"{REGIME_NAMES[kind]}: {len(cells)} heads kept in all {len(names)} tasks that pruned ({', '.join(names)}; "
            f"heads kept {', '.join(map(str, kept))} of {len(table)})" + (f"; left out: {left_out}" if left_out else "")
            + f"; chance {chance_stem_cells(kept, len(table)):.1f} (p {format_p(p_global)}), within layers "
            f"{chance_stem_cells_by_layer(by_layer, heads):.1f} (p {format_p(p_layer)}); the stricter: {marker}; "
            f"{len(every)} of them in "
            f"every seed: {heads_text(every)}"
            + (f"; in most seeds only: {heads_text([h for h in cells if h not in every])}"
               if len(every) < len(cells) else ""))
        probe_keys = []
        if len(cells) == len(table):
            claim.notes.append(f"{REGIME_NAMES[kind]}: every head survives in every task, so there is nothing to "
                               "hold against the probe heads")
        elif cells and pretrained:
            ranks = stem_cells_vs_probes(table, pretrained[:1], CLAIM_SHUFFLES, block=block)
            for r in ranks.to_dict("records"):
                if r.get("note"):
                    continue
                key = f"{REGIME_NAMES[kind]} {r['probe'].upper()} probe"
                probe_keys.append(key)
                marker = claim.add(Test(key, stricter(r), floor=FLOOR, value=r["mean percentile"], runs=runs,
                                    what={"regime": kind, "probe": r["probe"], "statistic": "mean percentile"},
                                    numbers={"null_mean": r["null mean"], "p_global": r["p"],
                                             "layer_null_mean": r["layer null mean"], "p_layer": r["layer p"]}))
                claim.lines.append(
                    f"{REGIME_NAMES[kind]}, stem cells among the pretrained encoder's {r['probe'].upper()} probe heads: "
                    f"mean percentile {r['mean percentile']:.1f} (random sets of {len(cells)}: mean {r['null mean']:.1f}, "
                    f"p {format_p(r['p'])}; matched per layer: mean {r['layer null mean']:.1f}, p {format_p(r['layer p'])}; the "
                    f"stricter: {marker}); best head {r['best head']}")
        found[kind] = (count_key, probe_keys)
    if not pretrained:
        claim.notes.append("no probe report of the pretrained encoder: stem cells not held against probe heads")
    claim.adjust()
    answers = []
    for kind, (count_key, probe_keys) in found.items():
        hits = sum(claim.significant(k) for k in probe_keys)
        answers.append(f"{REGIME_NAMES[kind]}: count above both chances {'yes' if claim.significant(count_key) else 'no'}"
                       f", best probe heads for {hits} of {len(probe_keys)} probes")
        if kind == next(iter(found)):  # the first regime present decides (DP first)
            blocked = unreachable(claim, [count_key])
            claim.verdict = ("" if blocked else
                             "yes" if claim.significant(count_key) and majority(hits, len(probe_keys)) else
                             "partly" if claim.significant(count_key) else "no")
            if blocked:
                answers[-1] += f" ({blocked})"
    claim.answer = "; ".join(answers) if answers else "cannot be tested: no regime with two single-task settings that pruned"
    return claim

