"""Decoder-only language models as gated encoders: Llama, Mistral, Qwen2/3, Gemma 1/2/3, OLMo 1/2/3,
Phi-3 and GPT-2, with grouped-query attention. Every model is a tiny random one built from its config
class and saved to a folder, with a byte-level BPE tokenizer trained in memory (no download), by the
decoder guide's builder docs/guides/tiny_lm.py."""
from __future__ import annotations


import pytest
import torch
import transformers

from tiny_lms import CASES, FAMILIES, HEADS, SENTENCES, _batch, tiny_lm
from mtl_heads.model.encoder import GatedEncoder, attention_shape, pool_words

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny matrices: see conftest.one_thread


@pytest.mark.parametrize("family,kv_heads", CASES, ids=[f"{f}-kv{kv}" for f, kv in CASES])
def test_gate_on_every_query_head(folders, family, kv_heads):
    encoder = GatedEncoder.from_pretrained(str(folders(family, kv_heads)), gate="hard_concrete").eval()
    config = encoder.model.config
    shape = attention_shape(config)
    assert (encoder.num_layers, encoder.num_heads, encoder.num_kv_heads) == (2, HEADS, kv_heads) == (
        shape.layers, shape.heads, shape.kv_heads)
    assert tuple(encoder.gate.values().shape) == (2, HEADS)
    assert encoder.head_dim == (16 if "head_dim" in FAMILIES.get(family, (None, {}))[1] else 32 // HEADS)
    assert encoder.causal and encoder.pool == "last" and encoder.max_length == 64
    assert encoder.tokenizer.pad_token == "<|endoftext|>"  # none was saved: pad = eos

    ids, attention, index, mask = _batch(encoder)
    with torch.no_grad():
        base = encoder(ids, attention, index, mask)
        # both layers for llama; one (layer, head) per other case keeps the file fast
        for layer, head in [(0, 1), (1, HEADS - 1)] if family == "llama" else [(int(kv_heads == 1), 2)]:
            closed = torch.ones(2, HEADS)
            closed[layer, head] = 0.0
            with encoder.mask_heads(closed):
                gated = encoder(ids, attention, index, mask).hidden
            # the same by hand: zero that head's slice of W_O's input (after the gate's own scaling)
            width = encoder.head_dim

            def zero(module, args, h=head):
                x = args[0].clone()
                x[..., h * width:(h + 1) * width] = 0
                return (x, *args[1:])

            handle = encoder.out_projs[layer].register_forward_pre_hook(zero)
            try:
                by_hand = encoder(ids, attention, index, mask).hidden
            finally:
                handle.remove()
            real = attention.bool()
            # exact: the other heads get the same products (gate * 1 is the gate) and W_O the same input
            torch.testing.assert_close(gated[real], by_hand[real], rtol=0, atol=0)
            assert not torch.allclose(gated[real], base.hidden[real], atol=1e-6)  # that head contributes
            # another head of the same KV group is untouched: closing it gives another output
            other = torch.ones(2, HEADS)
            other[layer, head ^ 1] = 0.0
            with encoder.mask_heads(other):
                assert not torch.allclose(encoder(ids, attention, index, mask).hidden[real], gated[real], atol=1e-6)


def test_causal_words_and_root(folders):
    llama = GatedEncoder.from_pretrained(str(folders("llama", 2)), gate="hard_concrete").eval()
    ids, attention, index, mask = _batch(llama)
    assert llama.root_source == "bos" and llama.root_embedding is None
    assert (ids[:, 0] == llama.tokenizer.bos_token_id).all() and (index[:, 0] == -1).all()
    with torch.no_grad():
        out = llama(ids, attention, index, mask)
    torch.testing.assert_close(out.root, out.hidden[:, 0])
    torch.testing.assert_close(out.words, pool_words(out.hidden, index, mask, mode="last"))

    gpt2 = GatedEncoder.from_pretrained(str(folders("gpt2")), gate="hard_concrete").eval()
    ids, attention, index, mask = _batch(gpt2)
    assert gpt2.root_source == "learnt" and (index[:, 0] == 0).all()  # no BOS: the first piece is a word's
    assert any(p is gpt2.root_embedding for p in gpt2.parameters())
    with torch.no_grad():
        out = gpt2(ids, attention, index, mask)
    assert out.root.shape == (2, 32)
    torch.testing.assert_close(out.root, gpt2.root_embedding.expand(2, -1))
    # a padded GPT-2 batch (pad = eos) pools the same words as the sentence alone; in float64: the
    # products of another shape may sum in another order, and a whole encoder has no simple float32 bound
    gpt2.double()
    n = int(attention[1].sum())
    with torch.no_grad():
        padded = gpt2(ids, attention, index, mask)
        alone = gpt2(ids[1:, :n], attention[1:, :n], index[1:, :n], mask[1:, :3])
    torch.testing.assert_close(padded.words[1, :3], alone.words[0], rtol=1e-10, atol=1e-10)

    first = GatedEncoder(gpt2.model, None, tokenizer=gpt2.tokenizer, pool="first")
    assert first.pool == "first"
    with pytest.raises(ValueError, match="pool"):
        GatedEncoder(gpt2.model, None, tokenizer=gpt2.tokenizer, pool="max")


def test_encoders_keep_mean_and_cls_root(tiny_encoder_dir):
    bert = GatedEncoder.from_pretrained(str(tiny_encoder_dir), gate="hard_concrete").eval()
    assert not bert.causal and bert.pool == "mean" and bert.root_embedding is None
    assert bert.num_kv_heads == bert.num_heads == 4 and bert.head_dim == 8
    assert not any("root" in name for name, _ in bert.named_parameters())  # run weights unchanged
    enc = bert.tokenizer([["The", "dog", "walked"]], is_split_into_words=True, return_tensors="pt")
    index = torch.tensor([[-1 if w is None else w for w in enc.word_ids(0)]])
    with torch.no_grad():
        out = bert(enc["input_ids"], enc["attention_mask"], index, torch.ones(1, 3, dtype=torch.bool))
    torch.testing.assert_close(out.root, out.hidden[:, 0], rtol=0, atol=0)
    assert torch.equal(out.words, pool_words(out.hidden, index, torch.ones(1, 3, dtype=torch.bool)))


def test_pool_first_last_mean_by_hand():
    hidden = torch.arange(16, dtype=torch.float).view(1, 8, 2)  # position t holds (2t, 2t + 1)
    index = torch.tensor([[-1, 0, 0, 0, 1, 2, 2, -1]])  # word 3 has no piece; the last position is padding
    mask = torch.tensor([[True, True, True, True, False]])
    first = pool_words(hidden, index, mask, mode="first")
    last = pool_words(hidden, index, mask, mode="last")
    mean = pool_words(hidden, index, mask, mode="mean")
    zero = [0.0, 0.0]
    assert first.tolist() == [[[2.0, 3.0], [8.0, 9.0], [10.0, 11.0], zero, zero]]
    assert last.tolist() == [[[6.0, 7.0], [8.0, 9.0], [12.0, 13.0], zero, zero]]
    assert mean.tolist() == [[[4.0, 5.0], [8.0, 9.0], [11.0, 12.0], zero, zero]]
    assert pool_words(hidden, index, mode="last").shape == (1, 3, 2)  # n_words from the index
    with pytest.raises(ValueError, match="mode"):
        pool_words(hidden, index, mask, mode="max")


TRAINED = [(f, 2 if f != "gpt2" else HEADS, "pos,dep", "heads") for f in [*FAMILIES, "gpt2"]] + [
    ("llama", 2, "pos,ner,dep,con,srl", "kv"),  # BOS as the DEP root, one gate per KV group
    ("gpt2", HEADS, "pos,ner,dep,con,srl", "heads"),  # learnt root vector, Conv1D projections
]


@pytest.mark.parametrize("family,kv_heads,tasks,groups", TRAINED, ids=[f"{t[0]}-{t[2]}-{t[3]}" for t in TRAINED])
def test_gated_training_run(folders, family, kv_heads, tasks, groups, tmp_path):
    """Every family trains with Hard Concrete gates (dynamic pruning, so the gates learn); the five
    tasks together on a BOS model and on one without BOS."""
    import json

    from mtl_heads.training.experiment import run

    metrics = run([f"encoder.name={folders(family, kv_heads)}", f"tasks={tasks}", "prune=dynamic",
                   f"encoder.gate_groups={groups}", "data.demo_sizes={train: 16, dev: 8, test: 8}",
                   "train.epochs=1", "train.batch_size=8", "wandb.mode=disabled", "train.progress=false",
                   f"run_dir={tmp_path / 'run'}"])
    assert set(metrics["test"]) == set(tasks.split(","))
    for scores in metrics["test"].values():
        assert all(0 <= v <= 100 for k, v in scores.items() if isinstance(v, float))
    gates = json.loads((tmp_path / "run" / "gates.json").read_text())
    assert gates["gate_groups"] == groups and len(gates["values"][0]) == HEADS
    if groups == "kv":  # the query heads of one KV group share their gate
        assert all(row[0] == row[1] and row[2] == row[3] for row in gates["values"])


def _regex_byte_level_tokenizer(folder, tokenizer_class: str | None):
    """A byte-level BPE saved as Qwen2 and Llama 3 ship theirs: a regex split, then
    ``ByteLevel(add_prefix_space=False)``, in a ``Sequence``; no BOS."""
    import json

    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tk = Tokenizer(models.BPE())
    split = pre_tokenizers.Split(Regex(r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s+"),
                                 behavior="isolated", invert=False)
    tk.pre_tokenizer = pre_tokenizers.Sequence([split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(SENTENCES * 20, trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    transformers.PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|endoftext|>").save_pretrained(folder)
    if tokenizer_class:
        meta = json.loads((folder / "tokenizer_config.json").read_text())
        (folder / "tokenizer_config.json").write_text(json.dumps({**meta, "tokenizer_class": tokenizer_class}))
    return len(tk.get_vocab())


@pytest.mark.parametrize("tokenizer_class", ["Qwen2Tokenizer", None], ids=["qwen2", "llama3-generic"])
def test_pre_split_words_are_encoded_as_in_running_text(tmp_path, tokenizer_class):
    """Qwen2 / Llama 3 tokenizers add no space before a pre-split word by themselves: ``dog`` would
    be a word-inner piece. Loaded through the encoder, every word after the first is encoded exactly
    as in running text (``Ġdog``), and the first word gets the space too (as GPT-2 and RoBERTa do)."""
    vocab = _regex_byte_level_tokenizer(tmp_path, tokenizer_class)
    config = transformers.Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=64, vocab_size=vocab)
    transformers.AutoModel.from_config(config).save_pretrained(tmp_path)
    bare = transformers.AutoTokenizer.from_pretrained(tmp_path)
    words = SENTENCES[2].split()
    assert "Ġcompany" not in bare.convert_ids_to_tokens(bare([words], is_split_into_words=True)["input_ids"][0])

    tokenizer = GatedEncoder.from_pretrained(str(tmp_path), gate="hard_concrete").tokenizer
    enc = tokenizer([words], is_split_into_words=True)
    pieces, word_ids = tokenizer.convert_ids_to_tokens(enc["input_ids"][0]), enc.word_ids(0)
    running = tokenizer.convert_ids_to_tokens(bare(" " + " ".join(words))["input_ids"])
    assert pieces == running
    assert [p for p, w in zip(pieces, word_ids) if w == 1][0] == "Ġcompany"
    assert sorted(set(w for w in word_ids if w is not None)) == list(range(len(words)))
    # words the regex cuts into several pieces (digits, dots, hyphens, clitics) get ONE space, before
    # the word, as in running text; and loading the edited tokenizer again (a removal folder) adds none
    from mtl_heads.model.encoder import word_tokenizer

    cut = "In 2024 the U.S. e-mail said 3.5 percent , n't".split()
    again = word_tokenizer(tokenizer, "again")
    enc = again([cut], is_split_into_words=True)
    assert again.convert_ids_to_tokens(enc["input_ids"][0]) == \
        bare.convert_ids_to_tokens(bare(" " + " ".join(cut))["input_ids"])
    assert sorted(set(w for w in enc.word_ids(0) if w is not None)) == list(range(len(cut)))


def test_a_bf16_checkpoint_trains_in_fp32(tmp_path, folders):
    """Decoder LMs ship bf16 weights; the gated encoder holds fp32 weights whatever the checkpoint
    (the optimiser's moments follow them), and a forward pass runs."""
    model = transformers.AutoModel.from_pretrained(folders("llama", 2))
    model.to(torch.bfloat16).save_pretrained(tmp_path)
    transformers.AutoTokenizer.from_pretrained(folders("llama", 2)).save_pretrained(tmp_path)
    encoder = GatedEncoder.from_pretrained(str(tmp_path), gate="hard_concrete")
    assert {p.dtype for p in encoder.parameters()} == {torch.float32}
    ids, attention, index, mask = _batch(encoder)
    assert torch.isfinite(encoder(ids, attention, index, mask).words).all()


def test_tiny_lm_builds_the_same_gqa_model_twice(tmp_path, capsys):
    """docs/guides/tiny_lm.py as the guide runs it: a GQA Llama whose files are the same bytes when built
    again (tokenizer retrained too), loadable as a gated encoder, whose tokenizer keeps demo words whole;
    a bad head count is one error line naming the option."""
    from mtl_heads.data.demo import generate_demo

    assert tiny_lm.main([str(tmp_path / "a")]) == 0
    tiny_lm.tokenizer.cache_clear()
    assert tiny_lm.main([str(tmp_path / "b"), "--family", "llama", "--kv-heads", "2", "--seed", "0"]) == 0
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    assert all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files)
    encoder = GatedEncoder.from_pretrained(str(tmp_path / "a"), gate="hard_concrete", gate_groups="kv")
    assert (encoder.num_layers, encoder.num_heads, encoder.num_kv_heads) == (2, 4, 2)
    assert tuple(encoder.gate.values().shape) == (2, 4) and encoder.tokenizer.bos_token == "<s>"
    # sentences of another seed than the tokenizer's: nearly every word is one token
    words = [s.words for s in generate_demo(50, seed=123)]
    enc = encoder.tokenizer(words, is_split_into_words=True)
    pieces = [[w for w in enc.word_ids(i) if w is not None] for i in range(len(words))]
    whole = sum(p.count(w) == 1 for p in pieces for w in set(p)) / sum(len(w) for w in words)
    assert whole > 0.95
    capsys.readouterr()
    with pytest.raises(SystemExit):
        tiny_lm.main([str(tmp_path / "c"), "--kv-heads", "3"])
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("--kv-heads: 3 does not divide --heads 4")
    assert not (tmp_path / "c").exists()
