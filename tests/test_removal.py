"""Physical head removal: the model with its heads removed computes what the gated one does, saves and
loads back (folders written when the command was called prune too), drops the expected parameters; the
remove command works on a small made-up run."""
import json

import pytest
import torch
import transformers

from helpers import _bench
from torch.nn import functional as F

from mtl_heads.config import ConfigError
from mtl_heads.data.batching import collate, tokenize
from mtl_heads.data.sentence import Sentence
from mtl_heads.model.encoder import GatedEncoder
from mtl_heads.model.gating import FixedGate
from mtl_heads.commands.remove import main
from mtl_heads.model.removal import HeadsRemovedEncoder, count_parameters, remove_encoder_heads, save_removal
from mtl_heads.training.build import load_removal

HIDDEN, HEADS, HEAD_DIM = 32, 4, 8
# uneven head counts, soft values, and a layer (1) that loses every head
GATES = [[0.7, 0.0, 1.0, 0.25], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.5, 0.0]]
KEPT = [[0, 2, 3], [], [2]]
# per removed head: Q, K, V rows (weights and biases) and W_O columns
PER_HEAD = 3 * (HEAD_DIM * HIDDEN + HEAD_DIM) + HIDDEN * HEAD_DIM


def tiny_model(model_type: str, attn: str = "sdpa") -> transformers.PreTrainedModel:
    """A 3-layer, 4-head, hidden-32 random encoder of ``model_type``."""
    common = {"vocab_size": 100, "max_position_embeddings": 64}
    bert_like = {"hidden_size": HIDDEN, "num_hidden_layers": 3, "num_attention_heads": HEADS,
                 "intermediate_size": 64, **common}
    configs = {
        "bert": lambda: transformers.BertConfig(**bert_like),
        "roberta": lambda: transformers.RobertaConfig(**bert_like),
        "electra": lambda: transformers.ElectraConfig(embedding_size=16, **bert_like),
        "distilbert": lambda: transformers.DistilBertConfig(dim=HIDDEN, n_layers=3, n_heads=HEADS, hidden_dim=64,
                                                            **common),
        "mpnet": lambda: transformers.MPNetConfig(**bert_like),
        "deberta-v2": lambda: transformers.DebertaV2Config(**bert_like),
    }
    torch.manual_seed(0)
    return transformers.AutoModel.from_config(configs[model_type](), attn_implementation=attn).eval()


def gated(model_type: str = "bert", attn: str = "sdpa") -> GatedEncoder:
    return GatedEncoder(tiny_model(model_type, attn), FixedGate(torch.tensor(GATES))).eval()


def random_batch(batch: int = 3, seq: int = 9):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 100, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[1, 6:] = 0  # padding
    return ids, mask


def max_diff(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    real = mask.bool()
    return (a[real] - b[real]).abs().max().item()


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("model_type", ["bert", "roberta", "electra", "distilbert"])
def test_removal_computes_the_gated_model(model_type, attn):
    encoder = gated(model_type, attn)
    plain = GatedEncoder(tiny_model(model_type, attn), gate=None).eval()  # same seed, same weights
    ids, mask = random_batch()
    removed = remove_encoder_heads(encoder).eval()
    assert removed.kept_heads == KEPT and removed.heads_per_layer == [3, 0, 1] and removed.gate is None
    with torch.no_grad():
        want, got, ungated = (m(ids, mask).hidden for m in (encoder, removed, plain))
    assert max_diff(want, got, mask) < 1e-4
    assert max_diff(want, ungated, mask) > 1e-2, "the gates must matter, or this test could not fail"
    # the gated encoder is left as it was
    assert encoder.out_projs[0].in_features == HEADS * HEAD_DIM
    assert max_diff(encoder(ids, mask).hidden, want, mask) == 0


def test_hard_concrete_gates_on_the_tiny_encoder(tiny_encoder_dir):
    encoder = GatedEncoder.from_pretrained(str(tiny_encoder_dir), gate="hard_concrete").eval()
    with torch.no_grad():  # eval gates: 0.5, 0 (clamped), 1 (clamped), 0.22; layer 1 all 0
        encoder.gate.log_alpha.copy_(torch.tensor([[0.0, -5.0, 5.0, -1.0], [-5.0, -5.0, -5.0, -5.0]]))
    values = encoder.gate_values()
    assert values[0, 1] == 0 and values[0, 2] == 1 and 0.2 < values[0, 3] < 0.25 and values[1].sum() == 0
    removed = remove_encoder_heads(encoder).eval()
    assert removed.kept_heads == [[0, 2, 3], []]
    sentences = [Sentence(words="The smaller model should agree .".split()), Sentence(words="Yes .".split())]
    examples, _ = tokenize(sentences, encoder.tokenizer, encoder.max_length)
    batch = collate(examples, encoder.tokenizer.pad_token_id)
    args = (batch["input_ids"], batch["attention_mask"], batch["word_index"], batch["word_mask"])
    with torch.no_grad():
        want, got = encoder(*args), removed(*args)
    assert max_diff(want.hidden, got.hidden, batch["attention_mask"]) < 1e-4
    assert (want.words - got.words).abs().max() < 1e-4


def test_headless_layer_is_layernorm_of_input_plus_bias():
    encoder = gated()
    removed = remove_encoder_heads(encoder).eval()
    attention = removed.model.encoder.layer[1].attention
    assert not any(hasattr(attention.self, name) for name in ("query", "key", "value")), "no Q/K/V left"
    assert attention.output.dense.weight.shape == (HIDDEN, 0)
    x = torch.randn(2, 5, HIDDEN)
    out = encoder.model.encoder.layer[1].attention.output  # the original weights
    by_hand = F.layer_norm(x + out.dense.bias, (HIDDEN,), out.LayerNorm.weight, out.LayerNorm.bias, out.LayerNorm.eps)
    with torch.no_grad():
        got = attention(x)[0]
        gated_out = encoder.model.encoder.layer[1].attention(x)[0]  # every gate of layer 1 is 0
    # exact: W_O of no context (removed) or of zeroed contexts (gated) adds 0 to its bias, and x + b == b + x
    torch.testing.assert_close(got, by_hand, rtol=0, atol=0)
    torch.testing.assert_close(gated_out, by_hand, rtol=0, atol=0)


def test_slices_and_parameter_count():
    encoder = gated()
    removed = remove_encoder_heads(encoder)
    gone = sum(HEADS - len(k) for k in KEPT)
    assert count_parameters(encoder.model) - count_parameters(removed.model) == gone * PER_HEAD == 8 * 1048
    layer0 = removed.model.encoder.layer[0].attention
    assert layer0.self.query.weight.shape == (3 * HEAD_DIM, HIDDEN) and layer0.self.value.bias.shape == (3 * HEAD_DIM,)
    assert layer0.self.num_attention_heads == 3 and layer0.self.all_head_size == 3 * HEAD_DIM
    # kept head 3 sits at rows 16..23 now; its W_O columns carry the gate 0.25
    original = encoder.model.encoder.layer[0].attention
    assert torch.equal(layer0.self.key.weight[16:24], original.self.key.weight[24:32])
    assert torch.allclose(layer0.output.dense.weight[:, 16:24], 0.25 * original.output.dense.weight[:, 24:32])
    assert removed.gate_values().tolist() == [[1, 0, 1, 1], [0, 0, 0, 0], [0, 0, 1, 0]]


def test_threshold_and_values_override():
    encoder = gated()
    assert remove_encoder_heads(encoder, threshold=0.6).kept_heads == [[0, 2], [], []]
    ones = remove_encoder_heads(GatedEncoder(tiny_model("bert")), values=torch.ones(3, HEADS))
    assert ones.heads_per_layer == [HEADS] * 3
    with pytest.raises(ValueError, match="shape"):
        remove_encoder_heads(encoder, values=torch.ones(2, HEADS))
    with pytest.raises(ValueError, match="already removed"):
        remove_encoder_heads(remove_encoder_heads(encoder))


def test_capture_gives_the_kept_heads():
    encoder, ids, mask = gated(attn="eager"), *random_batch()
    removed = remove_encoder_heads(encoder).eval()
    with torch.no_grad():
        want, got = encoder(ids, mask, capture=True), removed(ids, mask, capture=True)
    gates = torch.tensor(GATES)
    for layer, kept in enumerate(KEPT):
        assert got.attentions[layer].shape == (3, len(kept), 9, 9)
        assert got.head_contexts[layer].shape == (3, 9, len(kept), HEAD_DIM)
        assert torch.allclose(got.attentions[layer], want.attentions[layer][:, kept], atol=1e-5)
        # the kept contexts are the raw heads: the gate now lives in W_O
        scaled = got.head_contexts[layer] * gates[layer, kept][:, None]
        assert torch.allclose(scaled, want.head_contexts[layer][:, :, kept], atol=1e-5)


@pytest.mark.parametrize("model_type", ["bert", "distilbert"])
def test_save_and_load_round_trip(tmp_path, model_type):
    removed = remove_encoder_heads(gated(model_type)).eval()
    save_removal(removed, tmp_path / "p")
    heads = json.loads((tmp_path / "p" / "heads.json").read_text())
    assert heads["kept_heads"] == KEPT and heads["kind"] == "encoder"
    assert heads["gates"] == torch.tensor(GATES).tolist()  # float32 values, as folded
    loaded = load_removal(tmp_path / "p")
    assert isinstance(loaded, HeadsRemovedEncoder) and loaded.kept_heads == KEPT and not loaded.training
    eager = load_removal(tmp_path / "p", attn_implementation="eager")
    ids, mask = random_batch()
    with torch.no_grad():
        assert torch.equal(loaded(ids, mask).hidden, removed(ids, mask).hidden)
        assert max_diff(eager(ids, mask).hidden, removed(ids, mask).hidden, mask) < 1e-5
    assert count_parameters(loaded) == count_parameters(removed)


def test_a_folder_written_as_prune_still_loads(tmp_path):
    """Old records: before the command was called remove, its weights file was pruned.safetensors (named by
    heads.json's "weights", or by nothing in the oldest), in <run>/pruned/."""
    removed = remove_encoder_heads(gated()).eval()
    folder = save_removal(removed, tmp_path / "run" / "pruned")
    (folder / "removal.safetensors").rename(folder / "pruned.safetensors")
    heads = json.loads((folder / "heads.json").read_text())
    ids, mask = random_batch()
    for old in ({**heads, "weights": "pruned.safetensors"}, {k: v for k, v in heads.items() if k != "weights"}):
        (folder / "heads.json").write_text(json.dumps(old))
        with torch.no_grad():
            assert torch.equal(load_removal(folder)(ids, mask).hidden, removed(ids, mask).hidden)


def test_removal_dir_finds_the_new_folder_and_the_old_one(tmp_path):
    from mtl_heads.folders import removal_dir

    run = tmp_path / "run"
    assert removal_dir(run) is None
    for name in ("pruned", "removal"):  # the new name wins where both are there
        (run / name).mkdir(parents=True)
        (run / name / "heads.json").write_text("{}")
        assert removal_dir(run) == run / name


def test_bad_removal_folders_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="no heads.json"):
        load_removal(tmp_path)
    save_removal(remove_encoder_heads(gated()), tmp_path / "p")
    heads_file = tmp_path / "p" / "heads.json"
    heads = json.loads(heads_file.read_text())
    heads_file.write_text(json.dumps({**heads, "kept_heads": [[0, 2, 3], [1], [2]]}))
    with pytest.raises(ConfigError, match="removal.safetensors.*do not match heads.json"):
        load_removal(tmp_path / "p")
    heads_file.write_text(json.dumps({**heads, "kept_heads": [[3, 0], [], [2]]}))
    with pytest.raises(ConfigError, match="heads.json.*ascending"):
        load_removal(tmp_path / "p")
    heads_file.write_text("{\n  oops")
    with pytest.raises(ConfigError, match="heads.json:2"):
        load_removal(tmp_path / "p")


@pytest.mark.parametrize("model_type", ["mpnet", "deberta-v2"])
def test_unsupported_model_types_say_so(model_type):
    with pytest.raises(ValueError, match=f"model_type '{model_type}'"):
        remove_encoder_heads(GatedEncoder(tiny_model(model_type, "eager")))


def test_cli_removes_heads_of_a_run_and_the_folder_loads_back(tiny_encoder_dir, tmp_path, monkeypatch, capsys):
    from mtl_heads.training.build import load_run
    from mtl_heads.training.experiment import run

    monkeypatch.setenv("MTL_HEADS_CACHE", str(tmp_path / "cache"))
    run_dir = tmp_path / "run"
    run([f"encoder.name={tiny_encoder_dir}", "data.demo_sizes={train: 16, dev: 8, test: 8}", "train.epochs=1",
         "train.batch_size=8", "wandb.mode=disabled", "train.progress=false", "tasks=pos,ner",
         "encoder.gate=fixed", "encoder.gate_mask=[[0.7,0,1,0.25],[0,0,0,0]]", f"run_dir={run_dir}"])
    capsys.readouterr()
    assert main([str(run_dir)]) == 0
    printed = capsys.readouterr().out
    assert "heads kept: 3/8" in printed and "max |gated - removed| on 8 dev sentences" in printed

    loaded = load_removal(run_dir / "removal")
    assert loaded.encoder.kept_heads == [[0, 2, 3], []] and set(loaded.decoders) == {"pos", "ner"}
    original = load_run(run_dir)
    examples, _ = tokenize([Sentence(words="John lives in New York .".split())], loaded.encoder.tokenizer,
                           loaded.encoder.max_length)
    batch = collate(examples, loaded.encoder.tokenizer.pad_token_id)
    for task in ("pos", "ner"):
        assert torch.allclose(loaded(batch, task), original.model(batch, task), atol=1e-4)
        assert loaded.decode(batch, task) == original.model.decode(batch, task)

    assert main([str(run_dir), f"out={tmp_path / 'elsewhere'}", "threshold=0.5"]) == 0
    assert load_removal(tmp_path / "elsewhere").encoder.kept_heads == [[0, 2], []]


def test_cli_error_without_traceback(tmp_path, capsys):
    assert main([str(tmp_path / "no-run")]) == 2
    err = capsys.readouterr().err
    assert "not a finished run folder" in err and "Traceback" not in err


def test_bench_flops_and_a_tiny_run(tiny_encoder_dir, capsys):
    bench = _bench()
    # one layer, 2 heads of 4, hidden 8, batch 1, length 3: QKV 3*2*3*8*8, W_O 2*3*8*8, QK^T and AV 2*2*2*9*4
    assert bench.attention_flops([2], 4, 8, 1, 3) == 1152 + 384 + 288
    assert bench.attention_flops([1, 0], 4, 8, 1, 3) * 4 == bench.attention_flops([2, 2], 4, 8, 1, 3)
    assert bench.head_mask(6, 12, 0.5, seed=0).sum() == 36
    table = bench.main(["--encoder", str(tiny_encoder_dir), "--batches", "2", "--lengths", "8", "--repeats", "3",
                        "--warmup", "1", "--min-time", "0", "--budget", "0.01", "--device", "cpu"])
    assert len(table) == 1 and table["FLOP ratio"].iloc[0] == 0.5 and "verdict:" in capsys.readouterr().out


def test_kept_head_counts_that_do_not_divide_the_width():
    """A 12-head layer keeping 5 heads: W_O takes 5 * 4 inputs, which 12 heads do not divide; the
    head width comes from the config, not from W_O's width."""
    config = transformers.BertConfig(vocab_size=100, hidden_size=48, num_hidden_layers=1, num_attention_heads=12,
                                     intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    encoder = GatedEncoder(transformers.AutoModel.from_config(config).eval(), FixedGate(torch.tensor(
        [[1.0, 0, 1, 0, 1, 0, 0.5, 0, 0, 1, 0, 0]]))).eval()
    removed = remove_encoder_heads(encoder).eval()
    assert removed.heads_per_layer == [5] and removed.head_dim == 4
    ids, mask = random_batch()
    with torch.no_grad():
        assert max_diff(encoder(ids, mask).hidden, removed(ids, mask).hidden, mask) < 1e-4
