"""Decoder-only LMs with grouped-query attention: gates per KV group (``encoder.gate_groups=kv``) and
physical removal of whole KV groups (Llama-like q/k/v, Phi-3's fused qkv_proj, GPT-2's Conv1D,
OLMo 2/3's norms over all heads). The tiny random models are those of tests/test_decoder_lms.py."""
from __future__ import annotations

import json

import pytest
import torch

from mtl_heads.config import ConfigError, load_config
from mtl_heads.model.encoder import ADAPTERS, GatedEncoder
from mtl_heads.model.gating import GroupedGate, HardConcreteGate
from mtl_heads.model.removal import (DECODERS, HeadsRemovedEncoder, LayerConfig, remove_encoder_heads, removal_plan,
                                     save_removal)
from mtl_heads.training.build import load_removal
from mtl_heads.model.sparsity import Pruning, resolve_budget, sparsity_of
from tiny_lms import CASES, HEADS, _batch

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny matrices: see conftest.one_thread

# per KV head count (4 query heads, 2 layers): gate values, the query heads left in the weights, the
# zeroed ones among them. kv=4 (no GQA): single heads go. kv=2: layer 0 loses group 0 and zeroes head 3
# of group 1, layer 1 keeps both groups (uneven groups per layer). kv=1: one group, so layer 0 keeps
# it with two heads zeroed and layer 1 loses its only group (attention skipped).
PLANS = {
    4: ([[0.7, 0.0, 1.0, 0.25], [0.0, 0.0, 0.5, 0.0]], [[0, 2, 3], [2]], [[], []]),
    2: ([[0.0, 0.0, 0.6, 0.0], [0.7, 1.0, 0.3, 0.9]], [[2, 3], [0, 1, 2, 3]], [[3], []]),
    1: ([[0.5, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]], [[0, 1, 2, 3], []], [[1, 3], []]),
}
ATTN = ("sdpa", "eager")
PRUNE_CASES = [(f, kv, attn) for f, kv in CASES for attn in ATTN]


def _encoders(folder, kv_heads: int, attn: str):
    """(gated with the plan's fixed gates, the same weights without gates)."""
    gates = torch.tensor(PLANS[kv_heads][0])
    gated = GatedEncoder.from_pretrained(str(folder), gate="fixed", gate_kwargs={"mask": gates},
                                         attn_implementation=attn).eval()
    plain = GatedEncoder.from_pretrained(str(folder), gate="none", attn_implementation=attn).eval()
    return gated, plain


def _hidden(encoder, ids, attention):
    with torch.no_grad():
        return encoder(ids, attention).hidden[attention.bool()]  # [real tokens, hidden]


def _diff(a, b) -> float:
    return (a - b).abs().max().item()


def test_every_decoder_adapter_is_removable():
    assert DECODERS == {t for t, a in ADAPTERS.items() if a.causal}


@pytest.mark.parametrize("family,kv_heads,attn", PRUNE_CASES, ids=[f"{f}-kv{kv}-{a}" for f, kv, a in PRUNE_CASES])
def test_decoder_with_heads_removed_computes_the_gated_model(folders, tmp_path, family, kv_heads, attn):
    gated, plain = _encoders(folders(family, kv_heads), kv_heads, attn)
    _, kept, zeroed = PLANS[kv_heads]
    ids, attention, _, _ = _batch(gated)
    removed = remove_encoder_heads(gated).eval()
    assert removed.kept_heads == kept and removed.zeroed_heads == zeroed and removed.gate is None
    assert removed.kv_heads_per_layer == [len(k) * kv_heads // HEADS for k in kept]
    want, got = _hidden(gated, ids, attention), _hidden(removed, ids, attention)
    assert _diff(want, got) < 1e-4
    assert _diff(want, _hidden(plain, ids, attention)) > 1e-3, "the gates must matter, or this test could not fail"

    # the weights really shrank: layer 0's W_O inputs, and its K/V (or fused Q|K|V) outputs
    d, n_q, n_kv = removed.head_dim, len(kept[0]), removed.kv_heads_per_layer[0]
    adapter, layer = gated.adapter, removed.layers[0]
    o_proj = layer.get_submodule(adapter.out_proj)
    assert (o_proj.weight.shape[0] if adapter.out_proj_conv1d else o_proj.weight.shape[1]) == n_q * d
    if adapter.qkv == "separate":
        assert layer.get_submodule(adapter.value).out_features == n_kv * d
    elif adapter.qkv == "fused":
        assert layer.get_submodule(adapter.query).weight.shape[0] == (n_q + 2 * n_kv) * d
    else:  # GPT-2 Conv1D: weight [in, out]
        assert layer.get_submodule(adapter.query).weight.shape[1] == 3 * n_q * d
    attention_module = layer.get_submodule(adapter.query.rsplit(".", 1)[0])
    assert isinstance(attention_module.config, LayerConfig)
    assert attention_module.config.num_attention_heads == n_q and attention_module.config.num_key_value_heads == n_kv
    assert attention_module.config._attn_implementation == gated.model.config._attn_implementation

    # save, reload with the same attention (identical) and with the other one (equal within float rounding)
    save_removal(removed, tmp_path / "p")
    heads = json.loads((tmp_path / "p" / "heads.json").read_text())
    assert heads["kept_heads"] == kept and heads["zeroed_heads"] == zeroed
    assert heads["zeroed_query_heads"] == sum(map(len, zeroed)) and heads["kv_heads"] == kv_heads
    assert heads["kept"] == sum(map(len, kept)) - sum(map(len, zeroed))
    loaded = load_removal(tmp_path / "p", attn_implementation=attn)
    assert isinstance(loaded, HeadsRemovedEncoder) and loaded.zeroed_heads == zeroed
    assert torch.equal(_hidden(loaded, ids, attention), got)
    other = load_removal(tmp_path / "p", attn_implementation=ATTN[1 - ATTN.index(attn)])
    assert _diff(_hidden(other, ids, attention), want) < 1e-4
    if family == "gpt2":  # a learnt DEP root (no BOS) travels with the smaller encoder
        assert torch.equal(loaded.root_embedding, gated.root_embedding)


def test_zeroed_heads_are_zero_columns_of_w_o(folders):
    gated, _ = _encoders(folders("llama", 2), 2, "sdpa")
    removed = remove_encoder_heads(gated)
    original = gated.out_projs[0].weight  # [hidden, 4 * d]
    d = gated.head_dim
    kept_w = removed.out_projs[0].weight  # [hidden, 2 * d]: heads 2 (gate 0.6) and 3 (zeroed)
    assert torch.allclose(kept_w[:, :d], 0.6 * original[:, 2 * d:3 * d]) and not kept_w[:, d:].any()
    k_proj = removed.layers[0].self_attn.k_proj
    assert torch.equal(k_proj.weight, gated.layers[0].self_attn.k_proj.weight[d:])  # group 1's K rows only
    assert removed.gate_values().tolist() == [[0, 0, 1, 0], [1, 1, 1, 1]]


@pytest.mark.parametrize("family", ["olmo2", "olmo3"])
def test_norm_over_all_heads_keeps_q_and_k_rows(folders, family):
    """OLMo 2/3 normalise Q (and K) over all heads together: the removed heads' raw queries change
    the kept heads' normalised ones, so Q/K keep every row and the norm's output is sliced."""
    gated, _ = _encoders(folders(family, 2), 2, "sdpa")
    removed = remove_encoder_heads(gated)
    attention, d = removed.layers[0].self_attn, gated.head_dim
    assert attention.q_proj.out_features == HEADS * d and attention.k_proj.out_features == 2 * d
    assert attention.v_proj.out_features == d  # one KV group kept
    assert attention.q_norm.kept_columns.tolist() == list(range(2 * d, 4 * d))
    assert attention.k_norm.kept_columns.tolist() == list(range(d, 2 * d))


def test_uneven_groups_shrink_the_kv_cache(folders):
    gated, _ = _encoders(folders("llama", 2), 2, "sdpa")
    removed = remove_encoder_heads(gated).eval()
    ids, attention, _, _ = _batch(gated)
    with torch.no_grad():
        cache = removed.model(input_ids=ids, attention_mask=attention, use_cache=True).past_key_values
        full = gated.model(input_ids=ids, attention_mask=attention, use_cache=True).past_key_values
    kv_heads = [layer.keys.shape[1] for layer in cache.layers]
    assert kv_heads == removed.kv_heads_per_layer == [1, 2] and [layer.keys.shape[1] for layer in full.layers] == [2, 2]


def test_removal_plan_and_bad_groups(folders, tmp_path):
    kept, zeroed, scale = removal_plan(torch.tensor([[0.0, 0.0, 0.5, 0.0005]]), group_size=2)
    assert kept == [[2, 3]] and zeroed == [[3]] and scale.tolist() == [[0.0, 0.0, 0.5, 0.0]]
    gated, _ = _encoders(folders("llama", 2), 2, "sdpa")
    save_removal(remove_encoder_heads(gated), tmp_path / "p")
    heads_file = tmp_path / "p" / "heads.json"
    heads = json.loads(heads_file.read_text())
    heads_file.write_text(json.dumps({**heads, "kept_heads": [[1, 2], [0, 1, 2, 3]], "zeroed_heads": [[], []]}))
    # heads 1 and 2 split the KV groups (0, 1) and (2, 3)
    with pytest.raises(ConfigError, match="heads.json.*whole KV groups"):
        load_removal(tmp_path / "p")
    heads_file.write_text(json.dumps({**heads, "zeroed_heads": [[0], []]}))  # head 0 is not kept in layer 0
    with pytest.raises(ConfigError, match="zeroed_heads"):
        load_removal(tmp_path / "p")


# ---------------------------------------------------------------------- gates per KV group
def test_kv_gates_are_shared_by_their_query_heads(folders):
    folder = folders("llama", 2)
    encoder = GatedEncoder.from_pretrained(str(folder), gate="hard_concrete", gate_groups="kv").eval()
    gate = encoder.gate
    assert isinstance(gate, GroupedGate) and gate.group_size == 2 and encoder.gate_groups == "kv"
    assert gate.base.log_alpha.shape == (2, 2) and gate.values().shape == (2, HEADS)
    with torch.no_grad():
        gate.base.log_alpha.copy_(torch.tensor([[-10.0, 10.0], [10.0, 10.0]]))  # group 0 of layer 0 closed
    assert encoder.gate_values().tolist() == [[0, 0, 1, 1], [1, 1, 1, 1]]
    ids, attention, _, _ = _batch(encoder)
    by_heads = GatedEncoder.from_pretrained(str(folder), gate="fixed",
                                            gate_kwargs={"mask": [[0, 0, 1, 1], [1, 1, 1, 1]]}).eval()
    assert _diff(_hidden(encoder, ids, attention), _hidden(by_heads, ids, attention)) < 1e-6
    gate.train()
    sample = gate()  # one draw per group, shared by its two query heads
    assert torch.equal(sample[:, 0::2], sample[:, 1::2]) and sample.shape == (2, HEADS)
    # a KV gate counts its two query heads in the penalty
    torch.testing.assert_close(gate.penalty(), 2 * gate.base.penalty())
    assert gate.expected_l0().shape == (2, HEADS)
    # without GQA (GPT-2, every encoder) kv is one gate per head
    gpt2 = GatedEncoder.from_pretrained(str(folders("gpt2")), gate="hard_concrete", gate_groups="kv")
    assert isinstance(gpt2.gate, HardConcreteGate) and gpt2.gate.log_alpha.shape == (2, HEADS)
    with pytest.raises(ValueError, match="gate_groups"):
        GatedEncoder.from_pretrained(str(folder), gate="hard_concrete", gate_groups="pairs")


def test_kv_gates_remove_whole_groups(folders):
    encoder = GatedEncoder.from_pretrained(str(folders("qwen3", 1)), gate="hard_concrete", gate_groups="kv").eval()
    with torch.no_grad():
        encoder.gate.base.log_alpha.copy_(torch.tensor([[-10.0], [1.0]]))
    removed = remove_encoder_heads(encoder).eval()
    assert removed.kept_heads == [[], [0, 1, 2, 3]] and removed.zeroed_query_heads == 0
    assert removed.gate_groups == "kv"
    ids, attention, _, _ = _batch(encoder)
    assert _diff(_hidden(encoder, ids, attention), _hidden(removed, ids, attention)) < 1e-4


def test_budget_and_penalty_count_query_heads():
    assert resolve_budget(0.5, 64, group_size=4) == 32 and resolve_budget(0.3, 64, group_size=4) == 20
    assert resolve_budget(0.01, 64, group_size=4) == 4 and resolve_budget(36, 64, group_size=4) == 36
    with pytest.raises(ConfigError, match="prune.budget.*32 or 36"):
        resolve_budget(35, 64, group_size=4)
    gate = GroupedGate(HardConcreteGate(2, 2), group_size=2)  # 2 layers x 2 groups = 8 query heads
    cfg = load_config(["prune=dynamic", "tasks=pos", "prune.budget=0.5"])
    sparsity = sparsity_of(Pruning.from_config(cfg), gate)
    assert sparsity.controller.total == 8 and sparsity.controller.target == 4
    with torch.no_grad():
        gate.base.log_alpha.fill_(10.0)  # every group surely open: 8 query heads expected
    assert round(sparsity.expected_heads()) == 8
    lam = sparsity_of(Pruning.from_config(load_config(["prune=dynamic", "tasks=pos", "prune.lambda=0.5"])), gate)
    torch.testing.assert_close(lam.term(), 0.5 * 2 * gate.base.penalty())
    with pytest.raises(ConfigError, match="encoder.gate_groups"):
        load_config(["encoder.gate_groups=pairs"])


def test_budget_eval_rule_keeps_whole_groups():
    gate = GroupedGate(HardConcreteGate(2, 2, eval_keep_expected=True), group_size=2)
    with torch.no_grad():
        gate.base.log_alpha.copy_(torch.tensor([[3.0, -3.0], [2.0, -4.0]]))
    gate.eval()
    values = gate()
    assert values[:, 0::2].equal(values[:, 1::2])  # groups stay whole
    assert int((values > 0).sum()) == 2 * round(gate.base.expected_l0().sum().item())


def test_static_pruning_with_kv_gates_and_removal(folders, tmp_path, monkeypatch, capsys):
    """A run with fixed per-head gates on a GQA model, its heads removed by the command (a zeroed head), then
    static pruning from it with KV gates and a budget, its heads removed again (no zeroed head)."""
    from mtl_heads.training.experiment import run
    from mtl_heads.commands.remove import main

    monkeypatch.setenv("MTL_HEADS_CACHE", str(tmp_path / "cache"))
    base = ["data.demo_sizes={train: 16, dev: 8, test: 8}", "train.epochs=1", "train.batch_size=8",
            "wandb.mode=disabled", "train.progress=false"]
    trained = tmp_path / "trained"
    run(base + [f"encoder.name={folders('llama', 2)}", "tasks=pos", "encoder.gate=fixed",
                "encoder.gate_mask=[[0,0,1,0],[1,1,1,1]]", f"run_dir={trained}"])
    capsys.readouterr()
    assert main([str(trained), "wandb.mode=disabled"]) == 0
    printed = capsys.readouterr().out
    assert "zeroed query heads: 1" in printed and "KV heads kept: 3/4" in printed and "heads kept: 5/8" in printed
    heads = json.loads((trained / "removal" / "heads.json").read_text())
    assert heads["zeroed_query_heads"] == 1 and heads["gate_groups"] == "heads"

    static = tmp_path / "static"
    metrics = run(base + ["prune=static", f"init={trained}", "encoder.gate_groups=kv", "prune.budget=0.5",
                          "train.lr_gate=0.05", f"run_dir={static}"])
    gates = json.loads((static / "gates.json").read_text())
    values = torch.tensor(gates["values"])  # saved as the [layers, query heads] grid
    assert values.shape == (2, HEADS) and torch.equal(values[:, 0::2], values[:, 1::2])
    assert metrics["heads_total"] == 8 and metrics["heads_kept"] % 2 == 0
    assert main([str(static), "wandb.mode=disabled"]) == 0
    heads = json.loads((static / "removal" / "heads.json").read_text())
    assert heads["zeroed_query_heads"] == 0 and heads["gate_groups"] == "kv"
    assert heads["kept"] == metrics["heads_kept"]


def test_kv_gate_mask_per_group_or_per_head(folders, tmp_path):
    from mtl_heads.training.build import build_encoder

    cfg = load_config([f"encoder.name={folders('mistral', 2)}", "encoder.gate=fixed", "encoder.gate_groups=kv",
                       "encoder.gate_mask=[[1,0],[0.5,1]]"])
    assert build_encoder(cfg).gate_values().tolist() == [[1, 1, 0, 0], [0.5, 0.5, 1, 1]]
    cfg.encoder.gate_mask = [[1, 1, 0, 0], [1, 1, 1, 1]]  # a query-head grid, equal within each group
    assert build_encoder(cfg).gate_values().tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    cfg.encoder.gate_mask = [[1, 0, 0, 0], [1, 1, 1, 1]]
    with pytest.raises(ConfigError, match="encoder.*one value per\\s+group"):
        build_encoder(cfg)


def test_bench_decoder_case_on_a_tiny_shape(monkeypatch, capsys):
    from helpers import _bench

    bench = _bench()
    mask = bench.group_mask(8, 16, 4, 0.5, seed=0)  # [layers, heads]: 2 of 4 groups (of 4 heads) per layer
    assert (mask.sum(1) == 8).all() and torch.equal(mask, mask[:, ::4].repeat_interleave(4, dim=1))
    assert bench.kv_cache_bytes([4] * 8, 128, torch.float32) == 32768
    assert bench.kv_cache_bytes([2] * 8, 128, torch.bfloat16) == 8192
    full = bench.attention_flops([16], 128, 2048, 1, 128, [4])
    assert bench.attention_flops([8], 128, 2048, 1, 128, [2]) * 2 == full
    assert full == 2 * 2 * 128 * 2048 * (16 + 4) * 128 + 2 * 2 * 16 * 128 * 128 * 128
    # the whole --decoder path (rotary embeddings for the blocks, KV-cache line) on a tiny Llama shape
    monkeypatch.setattr(bench, "DECODER", {"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
                                           "num_hidden_layers": 2, "intermediate_size": 64, "vocab_size": 1100,
                                           "max_position_embeddings": 64})
    table = bench.main(["--decoder", "--lengths", "8", "--repeats", "3", "--warmup", "1", "--min-time", "0",
                        "--budget", "0.01", "--device", "cpu"])
    printed = capsys.readouterr().out
    assert len(table) == 1 and table["FLOP ratio"].iloc[0] == 0.5 and table["batch"].iloc[0] == 1
    assert "KV cache per token: 256 -> 128 bytes" in printed and "verdict:" in printed
