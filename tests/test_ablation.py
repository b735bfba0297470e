"""Causal head ablation: the encoder hook (zero = closed gate, mean and resample values, other heads
untouched), layer-matched random sets, the p-value, and ``python -m mtl_heads ablate`` end to end on
a tiny encoder run and a tiny GQA decoder LM run with gates per KV group."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from mtl_heads.analysis.ablation import (METHODS, drop_summary, head_grid, kv_block, matched_sets, mean_contexts,
                                possible_sets, resample_donors, table_lines, task_batches, task_score)
from mtl_heads.commands.ablate import judge, sets_needed
from mtl_heads.model.encoder import GatedEncoder
from mtl_heads.model.gating import FixedGate
from mtl_heads.model.headsets import head_name, parse_head
from mtl_heads.stats import one_sided_p
from helpers import HEADS, LAYERS, padded_batch, tiny_model
from tiny_lms import _batch

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny matrices: see conftest.one_thread

CHOSEN = [(0, 1), (1, 2), (1, 3)]


def grid(heads=CHOSEN, layers=LAYERS, width=HEADS) -> torch.Tensor:
    out = torch.zeros(layers, width, dtype=torch.bool)
    for layer, head in heads:
        out[layer, head] = True
    return out


@pytest.fixture(params=["bert-gated", "bert-no-gate", "llama-kv2"])
def encoder_and_batch(request, folders):
    """(encoder in eval mode, input ids, attention mask): a BERT with random fixed gates, the same
    without gates, and a Llama with 4 query heads sharing 2 KV heads."""
    if request.param == "llama-kv2":
        encoder = GatedEncoder.from_pretrained(str(folders("llama", 2)), gate="hard_concrete").eval()
        ids, attention, _, _ = _batch(encoder)
        return encoder, ids, attention
    model = tiny_model("bert")
    gate = FixedGate(torch.rand(LAYERS, HEADS, generator=torch.Generator().manual_seed(1)) + 0.1) \
        if request.param == "bert-gated" else None
    ids, attention = padded_batch(model)
    return GatedEncoder(model, gate).eval(), ids, attention


def raw_and_patched(encoder, ids, attention, heads, value=None):
    """Per layer, W_O's input before the gate hook (a hook put first) and the captured one after
    the gate and the replacement, from one pass with ``heads`` replaced by ``value``."""
    raw = {}
    with encoder.replace_heads(heads, value), encoder.capture_contexts() as captured, torch.no_grad():
        handles = [proj.register_forward_pre_hook(lambda m, a, i=i: raw.__setitem__(i, a[0]), prepend=True)
                   for i, proj in enumerate(encoder.out_projs)]
        try:
            encoder(ids, attention)
        finally:
            for handle in handles:
                handle.remove()
    d = encoder.head_dim
    gates = encoder.gate_values()  # [layers, heads]
    gated = [(raw[i].unflatten(-1, (encoder.num_heads, d)) * gates[i].to(raw[i].dtype)[:, None]) if encoder.gate
             is not None else raw[i].unflatten(-1, (encoder.num_heads, d)) for i in range(encoder.num_layers)]
    return gated, list(captured)  # each per layer [batch, seq, heads, head_dim]


def clean_contexts(encoder, ids, attention):
    with torch.no_grad(), encoder.capture_contexts() as captured:
        encoder(ids, attention)
    return list(captured)


def hook_counts(encoder):
    return [len(p._forward_pre_hooks) for p in encoder.out_projs]


# --- the hook ---------------------------------------------------------------------------------
def test_zero_ablation_is_a_closed_gate(encoder_and_batch):
    encoder, ids, attention = encoder_and_batch
    hooks = hook_counts(encoder)
    with torch.no_grad():
        with encoder.replace_heads(grid()):
            zeroed = encoder(ids, attention).hidden
        with encoder.mask_heads((~grid()).float()):
            closed = encoder(ids, attention).hidden
        plain = encoder(ids, attention).hidden
    assert torch.equal(zeroed, closed) and not torch.equal(zeroed, plain)
    assert hook_counts(encoder) == hooks  # nothing left behind (gate-less: no hook at all)


@pytest.mark.parametrize("method", ["zero", "mean"])
def test_chosen_heads_replaced_others_untouched(encoder_and_batch, method):
    encoder, ids, attention = encoder_and_batch
    shape = (encoder.num_layers, encoder.num_heads, encoder.head_dim)
    value = torch.randn(shape, generator=torch.Generator().manual_seed(2)) if method == "mean" else None
    before, after = raw_and_patched(encoder, ids, attention, grid(), value)
    for layer in range(encoder.num_layers):
        for head in range(encoder.num_heads):
            got = after[layer][:, :, head]  # [batch, seq, head_dim]
            if (layer, head) in CHOSEN:
                want = torch.zeros_like(got) if value is None else value[layer, head].expand_as(got)
            else:
                want = before[layer][:, :, head]
            assert torch.equal(got, want), (layer, head)


def test_resample_takes_the_donor_sentence(encoder_and_batch):
    encoder, ids, attention = encoder_and_batch
    clean = clean_contexts(encoder, ids, attention)
    means = torch.randn(encoder.num_layers, encoder.num_heads, encoder.head_dim)
    donors = resample_donors(clean, attention, means, layers=[0, 1])
    before, after = raw_and_patched(encoder, ids, attention, grid(), donors)
    batch, seq = attention.shape
    for layer, head in CHOSEN:
        for i in range(batch):
            donor = (i - 1) % batch  # the batch rolled by one
            for t in range(seq):
                want = clean[layer][donor, t, head] if attention[donor, t] else means[layer, head]
                assert torch.equal(after[layer][i, t, head], want), (layer, head, i, t)
    assert torch.equal(after[0][:, :, 0], before[0][:, :, 0])  # a head outside the set
    assert resample_donors(clean, attention, means, layers=[1])[0] is None  # only the layers asked for


def test_resample_of_one_sentence_is_the_mean():
    contexts = [torch.randn(1, 5, HEADS, 8)]
    means = torch.randn(1, HEADS, 8)
    donors = resample_donors(contexts, torch.ones(1, 5, dtype=torch.long), means, [0])
    assert torch.equal(donors[0], means[0].expand(1, 5, HEADS, 8))


def test_bad_values_and_nesting():
    encoder = GatedEncoder(tiny_model("bert")).eval()
    ids, attention = padded_batch(encoder.model)
    with pytest.raises(ValueError, match="heads has shape"):
        with encoder.replace_heads(torch.ones(3, HEADS, dtype=torch.bool)):
            pass
    with pytest.raises(ValueError, match=r"\[layers, heads, head_dim\]"):
        with encoder.replace_heads(grid(), torch.zeros(LAYERS, HEADS)):
            pass
    wrong = [torch.zeros(1, 9, HEADS, 8)] * LAYERS  # a value per position for another batch size
    with pytest.raises(ValueError, match="this batch needs"), encoder.replace_heads(grid(), wrong):
        encoder(ids, attention)
    with pytest.raises(RuntimeError, match="already inside"), encoder.replace_heads(grid()):
        with encoder.replace_heads(grid()):
            pass
    assert hook_counts(encoder) == [0] * LAYERS


def test_capture_inside_mask_heads_gates_once():
    """A gate-less encoder inside mask_heads: a capturing pass gets the hooks once (not twice)."""
    encoder = GatedEncoder(tiny_model("bert")).eval()
    ids, attention = padded_batch(encoder.model)
    plain = clean_contexts(encoder, ids, attention)
    with torch.no_grad(), encoder.mask_heads(torch.full((LAYERS, HEADS), 0.5)):
        out = encoder(ids, attention, capture=True)
        assert hook_counts(encoder) == [1] * LAYERS
    layer0 = out.head_contexts[0]
    torch.testing.assert_close(layer0, 0.5 * plain[0])
    assert hook_counts(encoder) == [0] * LAYERS


# --- head sets and the null ---------------------------------------------------------------------
def test_layer_matched_sets():
    chosen = np.zeros((3, 6), dtype=bool)
    chosen[0, [1, 4]] = chosen[1, 2] = True
    sets = matched_sets(chosen, 50, seed=3)
    assert sets.shape == (50, 3, 6) and (sets.sum(2) == [2, 1, 0]).all()
    assert np.array_equal(sets, matched_sets(chosen, 50, seed=3))
    assert not np.array_equal(sets, matched_sets(chosen, 50, seed=4))
    assert len({s.tobytes() for s in sets}) > 10  # they vary
    assert sets[:, 0].any(0).all()  # every head of layer 0 is drawn by some set
    assert possible_sets(chosen) == 15 * 6


def test_whole_kv_groups():
    chosen = np.zeros((2, 8), dtype=bool)
    chosen[0, 2:4] = chosen[1, 4:8] = True  # groups of 2: one group in layer 0, two in layer 1
    assert kv_block(chosen, 2, "kv") == 2 and kv_block(chosen, 2, "heads") == 1
    split = chosen.copy()
    split[0, 3] = False
    assert kv_block(split, 2, "kv") == 1  # a split group: drawn head by head
    sets = matched_sets(chosen, 40, seed=0, block=2).reshape(40, 2, 4, 2)  # [sets, layers, groups, 2]
    assert (sets.all(-1) == sets.any(-1)).all() and (sets.sum((2, 3)) == [2, 4]).all()
    assert possible_sets(chosen, block=2) == 4 * 6


def test_full_layers_make_a_degenerate_null():
    chosen = np.zeros((2, 4), dtype=bool)
    chosen[1] = True
    assert possible_sets(chosen) == 1
    assert (matched_sets(chosen, 5) == chosen).all()


def test_p_value_and_summary_by_hand():
    assert one_sided_p(2.0, [1.0, 2.0, 3.0, 0.5]) == pytest.approx(3 / 5)
    assert one_sided_p(10.0, [0.0] * 19) == pytest.approx(1 / 20)
    summary = drop_summary("las", 90.0, 80.0, [89.0, 85.0, 70.0, 90.0])
    assert summary["drop"] == 10.0 and summary["random_drops"] == [1.0, 5.0, 20.0, 0.0]
    assert summary["p"] == pytest.approx(2 / 5) and summary["null_mean"] == pytest.approx(6.5)
    assert summary["null_95"] == pytest.approx(np.percentile([1, 5, 20, 0], 95))


def judged(methods: dict[str, dict[str, list[float]]], sets: int, possible: int = 10**6, base: float = 90.0) -> dict:
    """A made-up record judged as the command does: per method and task, [ablated score, random sets' scores...]."""
    record = {"heads": ["L0H1"], "source": "list", "random_sets": sets, "seed": 0, "heads_per_layer": [1, 0],
              "split": "test", "possible_sets": possible, "notes": [],
              "methods": {m: {t: drop_summary("acc", base, scores[0], scores[1:]) for t, scores in by_task.items()}
                          for m, by_task in methods.items()}}
    return judge(record)


def test_verdicts_holm_over_the_table_by_hand():
    """2 methods x 2 tasks, 20 random sets: p = 1/21, 3/21, 11/21, 21/21; Holm over the 4 by hand:
    4/21, 3 * 3/21 = 9/21, 2 * 11/21 = 22/21 -> 1, 1 (monotone). The floor 1/21 at zero pos; no test can
    pass (4/21 >= 0.05): 80 sets are needed (4/81 < 0.05 <= 4/80)."""
    scores = {"zero": {"pos": [80.0] + [89.0] * 20,                       # every random set drops less: p 1/21
                       "dep": [80.0] + [79.0] * 2 + [89.0] * 18},         # 2 drop more: p 3/21
              "mean": {"pos": [80.0] + [79.0] * 10 + [89.0] * 10,         # p 11/21
                       "dep": [89.5] + [80.0] * 20}}                      # p 21/21
    record = judged(scores, 20)
    results = [r for by_task in record["methods"].values() for r in by_task.values()]
    assert [r["p"] for r in results] == pytest.approx([1 / 21, 3 / 21, 11 / 21, 1.0])
    assert [r["p_holm"] for r in results] == pytest.approx([4 / 21, 9 / 21, 1.0, 1.0])
    assert [r["p_at_floor"] for r in results] == [True, False, False, False]
    assert {r["verdict"] for r in results} == {"not shown"}
    verdicts = record["verdicts"]
    assert verdicts["tests"] == 4 and verdicts["alpha"] == 0.05 and verdicts["p_floor"] == pytest.approx(1 / 21)
    assert verdicts["smallest_p_holm"] == pytest.approx(4 / 21) and verdicts["sets_needed"] == 80
    assert any(n.startswith("warning: no test can pass") and "random_sets=80" in n for n in verdicts["notes"])
    assert any(n.startswith("* p at its floor 1/21") and "(zero pos)" in n for n in verdicts["notes"])
    lines = table_lines(record)
    assert lines[2].endswith("Holm p  verdict") and lines[3].split()[-4:] == ["0.048*", "0.190", "not", "shown"]
    assert sum(line.startswith("verdict: needed when") for line in lines) == 1 and "over the 4 tests" in lines[7]


def test_verdicts_with_enough_sets_and_a_negative_drop():
    """99 random sets, 2 tests: p 1/100 and 3/100 -> Holm 2/100 and 3/100, both below 0.05; a p at the floor
    whose drop is negative (every random set cost even more) is "not shown"."""
    record = judged({"zero": {"pos": [80.0] + [89.0] * 99, "dep": [80.0] + [79.0] * 2 + [89.0] * 97}}, 99)
    pos, dep = record["methods"]["zero"]["pos"], record["methods"]["zero"]["dep"]
    assert (pos["p_holm"], dep["p_holm"]) == pytest.approx((2 / 100, 3 / 100))
    assert pos["verdict"] == dep["verdict"] == "needed" and pos["p_at_floor"] and not dep["p_at_floor"]
    assert not any(n.startswith("warning") for n in record["verdicts"]["notes"])
    better = judged({"zero": {"pos": [90.5] + [93.0] * 99}}, 99)["methods"]["zero"]["pos"]  # drop -0.5, p 1/100
    assert better["p"] == pytest.approx(1 / 100) and better["p_holm"] == pytest.approx(1 / 100)
    assert better["verdict"] == "not shown"


def test_verdicts_of_a_fixed_null_and_the_sets_needed():
    record = judged({"zero": {"pos": [80.0] + [80.0] * 5}}, 5, possible=1)  # every random set is the set itself
    result = record["methods"]["zero"]["pos"]
    assert result["verdict"] == "cannot be tested" and result["p_holm"] is None
    assert record["verdicts"]["tests"] == 0 and record["verdicts"]["sets_needed"] is None
    assert [sets_needed(m, 0.05) for m in (1, 2, 3, 6, 15)] == [20, 40, 60, 120, 300]


def test_committed_study_records_read_and_judge():
    """The study's ablation.json files print and judge, and feed claim 6's reader: those written before
    the verdicts print as before and gain a verdict column when judged; those written since carry their
    verdicts, and judging them again changes none."""
    from mtl_heads.study import read_ablations

    root = Path(__file__).resolve().parents[1] / "docs" / "ewt-study"
    found, notes = read_ablations([str(root)])
    assert len(found) >= 1 and not notes
    kinds = set()
    for _, record in found:
        copy = judge(json.loads(json.dumps(record)))
        verdicts = [r["verdict"] for by_task in copy["methods"].values() for r in by_task.values()]
        assert verdicts and all(v in ("needed", "not shown") for v in verdicts)
        if "verdicts" in record:
            kinds.add("judged")
            assert table_lines(record)[2].endswith("verdict") and table_lines(copy) == table_lines(record)
        else:
            kinds.add("before verdicts")
            assert not table_lines(record)[2].endswith("verdict")
            assert len(table_lines(copy)) > len(table_lines(record))
    assert "before verdicts" in kinds


def test_head_names():
    assert head_grid(["L0H1", "l1h3"], 2, 4).tolist() == [[False, True, False, False], [False, False, False, True]]
    for names, message in ((["L2H0"], "outside the 2 x 4 grid"), (["L0H1", "L0H1"], "twice"),
                           (["X1"], "not a head name"), ([], "no heads")):
        with pytest.raises(ValueError, match=message):
            head_grid(names, 2, 4)


# --- the command ----------------------------------------------------------------------------------
TRAIN = ["data.demo_sizes={train: 16, dev: 8, test: 8}", "train.epochs=1", "train.batch_size=8",
         "wandb.mode=disabled", "train.progress=false", "seed=1", "device=cpu"]


@pytest.fixture(scope="module")
def runs(tiny_runs, folders):
    """``{"bert": a POS + DEP run of the tiny BERT, "llama": a POS + DEP run of a Llama with 2 KV heads
    and gates per KV group}``."""
    return {"bert": tiny_runs(*TRAIN, "tasks=pos,dep"),
            "llama": tiny_runs(*TRAIN, "tasks=pos,dep", "encoder.gate_groups=kv", encoder=folders("llama", 2))}


def ablate(*argv) -> tuple[int, dict | None]:
    from mtl_heads.commands.ablate import main

    code = main([str(a) for a in argv])
    out = next((Path(a.split("=", 1)[1]) for a in argv if str(a).startswith("out=")), None)
    return code, json.loads((out / "ablation.json").read_text()) if code == 0 and out else None


KEYS = ["kind", "run", "run_metrics_sha256", "weights_sha256", "tasks", "heads", "source", "label", "split", "sentences",
        "random_sets", "seed", "matched", "gate_groups", "heads_per_layer", "methods", "random_heads"]
RESULT_KEYS = ["metric", "base", "ablated", "drop", "random_drops", "null_mean", "null_95", "p"]


def closed_scores(run_dir, heads: list[tuple[int, int]]) -> dict[str, float]:
    """Each task's test score with ``heads`` closed through mask_heads, as the command batches them."""
    from mtl_heads.analysis.ablation import eval_mode, split_examples
    from mtl_heads.training.build import load_run

    loaded = load_run(run_dir)
    mask = torch.ones(LAYERS, HEADS)
    for layer, head in heads:
        mask[layer, head] = 0.0
    examples = split_examples(loaded, "test")
    with eval_mode(loaded.model), loaded.model.encoder.mask_heads(mask):
        return {t: task_score(loaded.model, t, task_batches(loaded.model, ex)) for t, ex in examples.items()}


@pytest.mark.parametrize("kind", ["bert", "llama"])
def test_command_end_to_end(runs, tmp_path, capsys, kind, monkeypatch):
    monkeypatch.setenv("MTL_HEADS_CACHE", str(runs[kind].parent / "cache"))
    heads = "L0H2,L0H3,L1H0,L1H1" if kind == "llama" else "L0H1,L1H2,L1H3"  # whole KV groups for the Llama
    code, record = ablate(runs[kind], f"heads={heads}", "random_sets=5", "progress=false", "label=test",
                          f"out={tmp_path / 'some'}")
    assert code == 0
    assert list(record)[:len(KEYS)] == KEYS and record["kind"] == "head ablation" and record["label"] == "test"
    # the training whose weights it read: its metrics.json's digest (a run trained again has another)
    assert record["run_metrics_sha256"] == hashlib.sha256((runs[kind] / "metrics.json").read_bytes()).hexdigest()
    # and the weights it read, by their digest (the digest the run's metrics.json records)
    assert record["weights_sha256"] == hashlib.sha256((runs[kind] / "model.safetensors").read_bytes()).hexdigest()
    assert record["weights_sha256"] == json.loads((runs[kind] / "metrics.json").read_text())["weights_sha256"]
    assert record["tasks"] == ["pos", "dep"] and record["sentences"]["pos"] == record["sentences"]["dep"] > 0  # the
    # Llama's 64 positions skip some of the 8 test sentences
    assert record["heads"] == heads.split(",") and record["source"] == "list" and record["split"] == "test"
    assert record["gate_groups"] == ("kv" if kind == "llama" else "heads")
    assert record["block"] == (2 if kind == "llama" else 1)
    assert record["heads_per_layer"] == ([2, 2] if kind == "llama" else [1, 2]) and not record["degenerate"]
    assert list(record["methods"]) == list(METHODS) and len(record["random_heads"]) == 5
    for names in record["random_heads"]:
        assert head_grid(names, LAYERS, HEADS).sum(1).tolist() == record["heads_per_layer"]
        if kind == "llama":  # whole KV groups: heads (0, 1) and (2, 3)
            assert all(head_name(layer, head ^ 1) in names for layer, head in map(parse_head, names))
    for by_task in record["methods"].values():
        for r in by_task.values():
            assert list(r)[:len(RESULT_KEYS)] == RESULT_KEYS and len(r["random_drops"]) == 5
            assert r["drop"] == pytest.approx(r["base"] - r["ablated"]) and 1 / 6 <= r["p"] <= 1
    printed = capsys.readouterr().out
    assert "resample  dep" in printed and "wrote" in printed
    # 3 methods x 2 tasks = 6 tests, 5 random sets: Holm's smallest p is 6/6, so 120 sets are needed
    assert record["verdicts"]["tests"] == 6 and record["verdicts"]["sets_needed"] == 120
    assert all(r["verdict"] == "not shown" and r["p_holm"] >= r["p"] for by_task in record["methods"].values()
               for r in by_task.values())
    assert "warning: no test can pass" in printed and "random_sets=120" in printed
    assert printed.count("verdict: needed when") == 1

    every = ",".join(f"L{layer}H{head}" for layer in range(LAYERS) for head in range(HEADS))
    code, record = ablate(runs[kind], f"heads={every}", "random_sets=3", "methods=zero", "progress=false",
                          f"out={tmp_path / 'every'}")
    assert code == 0 and record["degenerate"] and record["possible_sets"] == 1
    assert "degenerate" in record["notes"][0] and all(r["p"] == 1 for r in record["methods"]["zero"].values())
    assert {r["verdict"] for r in record["methods"]["zero"].values()} == {"cannot be tested"}
    closed = closed_scores(runs[kind], [(layer, head) for layer in range(LAYERS) for head in range(HEADS)])
    if kind == "bert":  # one full layer: the null varies in the other layer only
        code, partial = ablate(runs[kind], "heads=L0H0,L0H1,L0H2,L0H3,L1H0", "random_sets=2", "methods=zero",
                               "progress=false", f"out={tmp_path / 'layer0'}")
        assert code == 0 and partial["degenerate"] and partial["full_layers"] == [0] and partial["possible_sets"] == 4
        assert "degenerate null in layer 0" in partial["notes"][0]
    for task, r in record["methods"]["zero"].items():
        assert r["ablated"] == closed[task] and r["random_drops"] == [r["drop"]] * 3


def test_an_interrupted_ablation_goes_on_from_its_kept_passes(runs, tmp_path, capsys, monkeypatch):
    """Stopped halfway (Ctrl-C, or a machine taken back), the command keeps the passes scored so far in
    ablation.partial.json; run again, it scores only the others, and its record is the uninterrupted one's;
    kept passes of another study are not read (a line says so)."""
    import mtl_heads.analysis.ablation as ablation

    monkeypatch.setenv("MTL_HEADS_CACHE", str(runs["bert"].parent / "cache"))
    argv = [runs["bert"], "heads=L0H1,L1H2", "random_sets=4", "methods=zero,resample", "progress=false"]
    code, whole = ablate(*argv, f"out={tmp_path / 'whole'}")
    assert code == 0 and whole["resumed"] == 0
    written, passes, real_scores = ablation.KeptScores.write, [], ablation.batch_scores

    def counted(*args, **kwargs):  # one call per task group and pass; 1 group here
        passes.append(1)
        if len(passes) == 1 + 5 + 2:  # the unablated pass, every zero pass, 2 resample passes: then stopped
            raise KeyboardInterrupt
        return real_scores(*args, **kwargs)

    monkeypatch.setattr(ablation, "batch_scores", counted)
    monkeypatch.setattr(ablation.KeptScores, "write", lambda self, base, scores, force=False:
                        written(self, base, scores, force=True))  # every pass kept (else at most once a minute)
    out = tmp_path / "stopped"
    assert ablate(*argv, f"out={out}")[0] == 130
    assert not (out / "ablation.json").exists() and "ablation.partial.json" in capsys.readouterr().err
    kept = json.loads((out / "ablation.partial.json").read_text())
    assert {m: sorted(map(int, v)) for m, v in kept["scores"].items()} == {"zero": [0, 1, 2, 3, 4], "resample": [0]}
    passes.clear()
    code, resumed = ablate(*argv, f"out={out}")
    assert code == 0 and len(passes) == 1 + 4  # the unablated pass, the 4 resample passes left
    assert "going on from" in capsys.readouterr().out and not (out / "ablation.partial.json").exists()
    assert resumed["resumed"] == 1 and resumed["seconds"] >= kept["seconds"]
    for key in ("methods", "random_heads", "heads", "weights_sha256"):
        assert resumed[key] == whole[key]
    # another study's kept passes (another seed): not read, said so, replaced; the record is that study's own
    monkeypatch.setattr(ablation, "batch_scores", real_scores)
    other = tmp_path / "other"
    other.mkdir()
    (other / "ablation.partial.json").write_text(json.dumps(kept))
    code, seeded = ablate(*argv, "seed=1", f"out={other}")
    assert code == 0 and seeded["resumed"] == 0 and seeded["random_heads"] != whole["random_heads"]
    assert "not reading" in capsys.readouterr().out and not (other / "ablation.partial.json").exists()


def test_more_random_sets_go_on_from_a_record_of_fewer(runs, tmp_path, capsys, monkeypatch):
    """The rules draw more sets for a test near 0.05 (250, then 1,000): run again with more random_sets, the
    command scores only the sets its record lacks, and writes what a study of them all from the start writes;
    a record of another study (another seed) is not read, and a line says so."""
    import mtl_heads.analysis.ablation as ablation

    monkeypatch.setenv("MTL_HEADS_CACHE", str(runs["bert"].parent / "cache"))
    argv = [runs["bert"], "heads=L0H1,L1H2", "methods=zero,mean", "progress=false"]
    code, whole = ablate(*argv, "random_sets=5", f"out={tmp_path / 'whole'}")
    assert code == 0 and whole["extended"] == 0
    out = tmp_path / "grown"
    code, first = ablate(*argv, "random_sets=2", f"out={out}")
    assert code == 0 and first["random_heads"] == whole["random_heads"][:2]
    capsys.readouterr()
    passes, real_scores = [], ablation.batch_scores

    def counted(*args, **kwargs):
        passes.append(1)
        return real_scores(*args, **kwargs)

    monkeypatch.setattr(ablation, "batch_scores", counted)
    code, grown = ablate(*argv, "random_sets=5", f"out={out}")
    assert code == 0 and len(passes) == 1 + 2 * 3  # the unablated pass, then 3 new sets for each method
    assert f"going on from {out / 'ablation.json'}: its 2 random sets of 5" in capsys.readouterr().out
    assert grown["extended"] == 2 and grown["resumed"] == 1 and grown["seconds"] >= first["seconds"]
    assert grown["random_heads"] == whole["random_heads"] and grown["heads"] == whole["heads"]
    for method, by_task in whole["methods"].items():
        for task, r in by_task.items():
            g = grown["methods"][method][task]
            assert g["random_drops"] == pytest.approx(r["random_drops"], abs=1e-12)
            assert (g["p"], g["p_holm"], g["verdict"]) == (r["p"], r["p_holm"], r["verdict"])
    # fewer sets asked than the record holds: its first ones are read, and a line says the record shrinks
    capsys.readouterr()
    passes.clear()
    code, shrunk = ablate(*argv, "random_sets=3", f"out={out}")
    assert code == 0 and len(passes) == 1 and shrunk["random_heads"] == whole["random_heads"][:3]
    assert "holds 5 random sets, more than the 3 asked: the record written replaces it with 3" in capsys.readouterr().out
    # a record of another seed in the folder: its sets are not today's first ones; not read, said so
    passes.clear()
    code, seeded = ablate(*argv, "random_sets=5", "seed=1", f"out={tmp_path / 'whole'}")
    assert code == 0 and seeded["extended"] == 0 and len(passes) == 1 + 2 * 6
    assert "not going on from" in capsys.readouterr().out


def test_stem_cells_and_default_folder(runs, tmp_path, monkeypatch):
    monkeypatch.setenv("MTL_HEADS_CACHE", str(runs["bert"].parent / "cache"))
    report = tmp_path / "gates"
    report.mkdir()
    (report / "stem-cells.csv").write_text("layer,head,name,stem cell\n0,0,L0H0,False\n0,1,L0H1,True\n"
                                           "1,0,L1H0,False\n1,3,L1H3,True\n")
    code, _ = ablate(runs["bert"], f"heads={report}", "random_sets=2", "methods=mean", "tasks=pos", "label=stem cells",
                     "progress=false")
    (tmp_path / "wide.csv").write_text("layer,head,name,stem cell\n0,0,L0H0,True\n1,5,L1H5,False\n")
    assert ablate(runs["bert"], f"heads={tmp_path / 'wide.csv'}")[0] == 2  # a 2 x 6 grid, the run has 2 x 4
    record = json.loads((runs["bert"] / "ablation-stem_cells" / "ablation.json").read_text())
    assert code == 0 and record["heads"] == ["L0H1", "L1H3"]
    assert record["source"] == f"stem cells of {report / 'stem-cells.csv'}"
    assert list(record["methods"]) == ["mean"] and list(record["methods"]["mean"]) == ["pos"]
    assert record["reference"] == "dev" and record["reference_sentences"] == 8 and isinstance(record["seconds"], float) and record["seconds"] >= 0
    code, few = ablate(runs["bert"], "heads=L0H1,L1H3", "random_sets=2", "methods=mean", "tasks=pos", "progress=false",
                       "max_sentences=3", "reference_sentences=5", f"out={tmp_path / 'few'}")
    assert code == 0 and few["sentences"] == {"pos": 3} and few["reference_sentences"] == 5  # a sample, its means wider


def test_top_heads_of_a_probe_report(tmp_path):
    from omegaconf import OmegaConf

    from mtl_heads.analysis.ablation_heads import head_source

    folder = tmp_path / "report"
    folder.mkdir()
    (folder / "report.json").write_text(json.dumps({"probes": {"dep": {}}, "layers": 2, "heads": 4, "families": {
        "dep": {"arcs": {"labels": ["nsubj", "obj"], "unit": "%"}}}}))
    rows = ["layer,head,label,score,count"] + [f"{l},{h},nsubj,{10 * l + h},30" for l in range(2) for h in range(4)] \
        + [f"{l},{h},obj,{50 - 10 * l - h},10" for l in range(2) for h in range(4)]
    (folder / "dep.csv").write_text("\n".join(rows) + "\n")
    (folder / "dep_summary.csv").write_text("label,layer,head,score,count\n")
    cfg = OmegaConf.create({"heads": str(folder), "probe": "dep", "top": 2})
    heads = head_source(cfg)
    assert heads.names == ["L1H3", "L1H2"] and heads.source == f"top 2 dep heads of {folder}"  # 0.75 nsubj + 0.25 obj
    assert heads.shape == (2, 4) and heads.path == folder


@pytest.mark.parametrize("args,message", [
    (["heads=L0H1,L7H0"], "config key 'heads': L7H0: outside the 2 x 4 grid"),
    (["heads=L0H1,Q"], "config key 'heads': 'Q' is not a head name"),
    (["heads="], "config key 'heads': give the heads"),
    (["heads=L0H1", "methods=zero,drop"], "config key 'methods'"),
    (["heads=L0H1", "probe=dep"], "config keys 'probe' and 'top'"),
    (["heads=missing/stem-cells.csv"], "config key 'heads': missing/stem-cells.csv does not exist"),
    (["heads=L0H1", "tasks=ner"], "config key 'tasks': ner not among the tasks"),
])
def test_bad_input_is_one_line(runs, capsys, args, message):
    from mtl_heads.commands.ablate import main

    assert main([str(runs["bert"]), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1


def test_a_missing_or_unfinished_run_is_refused(tmp_path, capsys):
    from mtl_heads.commands.ablate import main

    assert main([str(tmp_path / "nowhere"), "heads=L0H1"]) == 2
    assert f"config key 'run': {tmp_path / 'nowhere'} is not a finished run folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.yaml").write_text("tasks: [pos]\n")
    assert main([str(tmp_path / "empty"), "heads=L0H1"]) == 2
    assert "missing: labels.json, model.safetensors" in capsys.readouterr().err


def test_help_lists_every_key(capsys):
    from mtl_heads.commands.ablate import main
    from mtl_heads.config import CONFIG_DIR, RULES

    assert main(["-h"]) == 0
    text = capsys.readouterr().out
    for key in yaml.safe_load((CONFIG_DIR / "ablate.yaml").read_text()):
        assert f"\n  {key} " in text, key
    assert RULES["methods"](list(METHODS)) is None and RULES["methods"](["zero", "zero"])


def test_probes_import_the_same_helpers():
    import mtl_heads.analysis.ablation as ablation
    import mtl_heads.model.scoring as core
    import probes.importance as importance

    for name in ("task_batches", "task_score", "eval_mode", "open_heads"):
        assert getattr(importance, name) is getattr(core, name) is getattr(ablation, name)


def test_mean_contexts_average_real_tokens():
    encoder = GatedEncoder(tiny_model("bert")).eval()
    ids, attention = padded_batch(encoder.model)
    model = torch.nn.Module()
    model.encoder = encoder
    means = mean_contexts(model, [({"input_ids": ids, "attention_mask": attention}, [])])
    clean = clean_contexts(encoder, ids, attention)
    for layer in range(LAYERS):
        torch.testing.assert_close(means[layer], clean[layer][attention.bool()].mean(0))


def test_tasks_on_the_same_sentences_share_passes(runs, monkeypatch):
    from mtl_heads.analysis.ablation import split_examples, task_groups
    from mtl_heads.training.build import load_run

    monkeypatch.setenv("MTL_HEADS_CACHE", str(runs["bert"].parent / "cache"))
    loaded = load_run(runs["bert"])
    groups = task_groups(loaded.model, split_examples(loaded, "test"), batch_size=3)
    assert [g.tasks for g in groups] == [["pos", "dep"]] and groups[0].sentences == 8 and len(groups[0].batches) == 3


def test_bf16_autocast(runs, tmp_path, monkeypatch):
    """precision=bf16 (autocast on the CPU, the CUDA code path): contexts, means and donors in bf16."""
    monkeypatch.setenv("MTL_HEADS_CACHE", str(runs["bert"].parent / "cache"))
    code, record = ablate(runs["bert"], "heads=L0H0,L1H1", "random_sets=2", "precision=bf16", "batch_size=3",
                          "progress=false", f"out={tmp_path}")
    assert code == 0 and record["precision"] == "bf16" and list(record["methods"]) == list(METHODS)


def test_claims_read_what_the_command_writes(runs, tmp_path, monkeypatch):
    """Claim 6 of ``python -m mtl_heads claims`` from a real ablation.json: the heads ablated are the DP
    stem cells found without POS and without DEP (made-up DP runs of POS, DEP and CON keep L0H1 and L1H2
    and one head each of their own), so the ablation counts for both tasks; with one seed, its pooled p
    is the command's p, per method and task."""
    import shutil

    from mtl_heads.study import REGIME_NAMES, check_claims, read_study, stem_heads
    from helpers import make_run

    monkeypatch.setenv("MTL_HEADS_CACHE", str(runs["bert"].parent / "cache"))
    study_dir = tmp_path / "study"
    run = study_dir / "mtl" / "seed1"
    shutil.copytree(runs["bert"], run)
    encoder = {"name": yaml.safe_load((run / "config.yaml").read_text())["encoder"]["name"], "gate": "hard_concrete"}
    for task, own in (("pos", (0, 0)), ("dep", (1, 0)), ("con", (0, 3))):
        gates = [[0.0] * HEADS for _ in range(LAYERS)]
        for layer, head in ((0, 1), (1, 2), own):
            gates[layer][head] = 1.0
        make_run(study_dir / f"{task}-dp" / "seed1", (task,), 1, experiment=f"{task}-dp", gates=gates, heads_kept=3,
                 prune={"mode": "dynamic", "lambda": "auto"}, encoder=encoder)  # one encoder: claims refuse two
    code, record = ablate(run, "heads=L0H1,L1H2", "random_sets=5", "methods=zero,mean", "progress=false",
                          "label=chosen", f"out={study_dir / 'ablation' / 'mtl-seed1'}")
    assert code == 0
    study = read_study([str(study_dir)])
    assert stem_heads(study, "dp", without="pos") == stem_heads(study, "dp", without="dep") == ["L0H1", "L1H2"]
    claim = check_claims(study)[5]
    assert len(study.ablations) == 1 and claim.lines[0].startswith(
        f"The {REGIME_NAMES['dp']} stem cells found without each task: without POS, DEP, CON: 2 heads, L0H1, L1H2")
    for method in ("zero", "mean"):
        for task in ("pos", "dep"):
            assert claim.tests[f"{REGIME_NAMES['dp']} MTL-2 {task.upper()} {method}"].p == pytest.approx(
                record["methods"][method][task]["p"])
    assert "needed by" in claim.answer  # 5 sets: too few for Holm over 2 tests, so no verdict
    assert claim.verdict == "" and "cannot reach significance" in claim.answer


def test_the_importance_matched_null_draws_within_each_layers_importance_bins(runs, tmp_path, monkeypatch):
    """matched=importance: each head's importance for the scored task in this run, each layer cut into thirds by
    it; every random set has as many heads in each (layer, third) cell as the ablated set."""
    from mtl_heads.analysis.ablation import IMPORTANCE_BINS

    monkeypatch.setenv("MTL_HEADS_CACHE", str(runs["bert"].parent / "cache"))
    code, record = ablate(runs["bert"], "heads=L0H1,L1H2,L1H3", "random_sets=8", "matched=importance", "methods=zero",
                          "tasks=pos", "progress=false", f"out={tmp_path / 'importance'}")
    assert code == 0 and record["matched"] == "layer and importance" and record["importance_bins"] == IMPORTANCE_BINS
    importance, cells = np.array(record["importance"]), np.array(record["importance_cells"])
    assert importance.shape == cells.shape == (2, 4) and (importance >= 0).all()
    for layer in range(2):  # a layer's cells follow its importance order
        order = np.argsort(importance[layer], kind="stable")
        assert (np.diff(cells[layer][order]) >= 0).all()
    wanted = sorted(cells[parse_head(h)] for h in record["heads"])
    for names in record["random_heads"]:
        assert sorted(cells[parse_head(h)] for h in names) == wanted
    # the null's own space: C(cell's heads, k) per cell, below the layer-matched C(4, 1) x C(4, 2) = 24
    grid = np.zeros((2, 4), dtype=bool)
    grid[0, 1] = grid[1, 2] = grid[1, 3] = True
    possible = possible_sets(grid, 1, cells)
    assert record["possible_sets"] == possible < 24 and len({tuple(sorted(n)) for n in record["random_heads"]}) <= possible
    assert (f"only {possible:,} distinct layer- and importance-matched sets exist: the random sets repeat"
            in record["notes"]) == (possible < 8)
    from mtl_heads.analysis.ablation import table_lines

    assert table_lines(record)[1].startswith("8 layer- and importance-matched random sets (seed 0")  # as drawn
    assert table_lines({**record, "matched": "layer"})[1].startswith("8 layer-matched random sets (seed 0")
    assert ablate(runs["llama"], "heads=L0H2,L0H3", "matched=importance", "random_sets=2", "progress=false",
                  f"out={tmp_path / 'kv'}")[0] == 2  # per-KV-group gates: drawn a group at a time, refused


def test_the_plan_is_built_from_the_commands_config():
    """AblationPlan.from_config reads configs/ablate.yaml's keys (reference_sentences is reference_max, an empty
    tasks list is every task); the plan is frozen, and its defaults are the YAML's but for the progress bar."""
    import dataclasses

    from mtl_heads.analysis.ablation import AblationPlan
    from mtl_heads.commands.ablate import parse_args
    from mtl_heads.config import CONFIG_DIR, load_config

    default = AblationPlan.from_config(load_config(parse_args(["runs/x"]), base=CONFIG_DIR / "ablate.yaml"))
    assert default == AblationPlan(progress=True) and default.reference_first is None
    cfg = load_config(parse_args(["runs/x", "methods=mean,zero", "random_sets=7", "seed=3", "matched=importance",
                                  "split=dev", "reference=train", "tasks=pos", "max_sentences=4",
                                  "reference_sentences=9", "batch_size=5", "precision=bf16", "label=a b",
                                  "progress=false"]), base=CONFIG_DIR / "ablate.yaml")
    plan = AblationPlan.from_config(cfg, source="stem cells")
    assert plan == AblationPlan(methods=("mean", "zero"), random_sets=7, seed=3, matched="importance", split="dev",
                                reference="train", tasks=("pos",), max_sentences=4, reference_max=9, batch_size=5,
                                precision="bf16", source="stem cells", label="a b", progress=False)
    assert plan.reference_first == 9 and dataclasses.replace(plan, reference_max=None).reference_first == 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.seed = 1
