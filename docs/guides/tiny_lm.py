"""A tiny random decoder-only language model in a local folder, built offline (no download).

The folder holds what ``encoder.name=<folder>`` and ``model=<folder>`` read from a hub model:
``config.json``, the weights (``model.safetensors``) and a fast tokenizer (``tokenizer.json``,
``tokenizer_config.json``). The weights are random (``torch.manual_seed(--seed)``), so the model
knows nothing of language; it is for trying the commands of docs/guides/decoder-lms.md in seconds
and for the tests (tests/test_decoder_lms.py builds every family with it).

The tokenizer is a byte-level BPE (GPT-2 style: a space before each word, ``Ġdog``; any text
encodes, unseen words byte by byte) trained on sentences of the embedded demo corpus
(``mtl_heads.data.demo``), so that nearly every demo word is one token. Llama-style families put a BOS
token ``<s>`` first (the DEP root slot); GPT-2 adds none and has no pad token (the loader pads
with eos), as the real ones do. Same arguments, same files: the build is deterministic.

    python docs/guides/tiny_lm.py models/tiny-llama                   # Llama, 4 query heads sharing 2 KV heads
    python docs/guides/tiny_lm.py models/tiny-qwen3 --family qwen3 --kv-heads 1
    python docs/guides/tiny_lm.py models/tiny-gpt2 --family gpt2 --kv-heads 4   # GPT-2 has no GQA
"""
from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import torch
import transformers

# family -> (config class, extra config keys); GPT-2 is built apart (GPT2Config names its sizes n_*)
FAMILIES = {
    "llama": (transformers.LlamaConfig, {}),
    "mistral": (transformers.MistralConfig, {}),
    "qwen2": (transformers.Qwen2Config, {}),
    "qwen3": (transformers.Qwen3Config, {"head_dim": 16}),  # heads * head_dim = 64 != hidden 32
    "gemma": (transformers.GemmaConfig, {"head_dim": 16}),
    "gemma2": (transformers.Gemma2Config, {"head_dim": 16, "query_pre_attn_scalar": 16}),
    "gemma3_text": (transformers.Gemma3TextConfig, {"head_dim": 16, "query_pre_attn_scalar": 16,
                                                    "sliding_window": 16}),
    "phi3": (transformers.Phi3Config, {"pad_token_id": None}),
    "olmo": (transformers.OlmoConfig, {}),
    "olmo2": (transformers.Olmo2Config, {}),
    "olmo3": (transformers.Olmo3Config, {}),
}
CHOICES = [*FAMILIES, "gpt2"]
DEMO_SENTENCES = 500  # demo sentences the default tokenizer is trained on (about 600 distinct words)


def demo_texts(n: int = DEMO_SENTENCES, seed: int = 0) -> tuple[str, ...]:
    """The first ``n`` sentences of the demo grammar with seed ``seed``, words joined by spaces."""
    from mtl_heads.data.demo import generate_demo

    return tuple(" ".join(sentence.words) for sentence in generate_demo(n, seed))


@functools.cache
def tokenizer(texts: tuple[str, ...], with_bos: bool = True, vocab_size: int = 2048):
    """A byte-level BPE trained on ``texts``, as a ``transformers.PreTrainedTokenizerFast``.

    Args:
        texts: the training text, one string per sentence (a tuple: the result is cached per argument).
        with_bos: True (Llama style): ``<s>`` is put before every input and is the BOS token; False
            (GPT-2 style): nothing is added, BOS = eos = ``<|endoftext|>``, no pad token. Default: True.
        vocab_size: the most tokens (256 bytes, 2 special tokens, then merges; training stops earlier
            when no pair is left to merge). Default: 2048.
    """
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(list(texts), trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<s>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    if with_bos:
        tk.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tk.token_to_id("<s>"))])
        return transformers.PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="<|endoftext|>")
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<|endoftext|>", eos_token="<|endoftext|>")


def build(folder, family: str = "llama", kv_heads: int = 2, *, heads: int = 4, layers: int = 2, hidden: int = 32,
          intermediate: int = 64, max_positions: int = 128, texts: tuple[str, ...] | None = None,
          vocab_size: int = 2048, seed: int = 0) -> Path:
    """Build a random model of ``family`` and its tokenizer and save both to ``folder``.

    Args:
        folder: the output folder (created; files of the same names are overwritten).
        family: a key of ``FAMILIES`` or ``gpt2``. Default: llama.
        kv_heads: key/value heads, shared by ``heads // kv_heads`` query heads each (grouped-query
            attention); must divide ``heads``; GPT-2 has no GQA, so it must equal ``heads``. Default: 2.
        heads: query heads per layer. Default: 4.
        layers: decoder layers. Default: 2.
        hidden: hidden size (``n_embd`` for GPT-2); ``hidden // heads`` is the head width unless the
            family's extra keys set ``head_dim``. Default: 32.
        intermediate: MLP width (not for GPT-2, which uses 4 x hidden). Default: 64.
        max_positions: the longest input in tokens (``max_position_embeddings``). Default: 128.
        texts: the tokenizer's training sentences. Default: None, the first 500 demo sentences.
        vocab_size: the tokenizer's most tokens. Default: 2048 (the demo sentences give about 1500).
        seed: the seed of the random weights. Default: 0.

    Returns:
        ``folder`` as a Path.

    Raises:
        ValueError: an unknown family or a head count that does not fit, one line naming the argument.
    """
    if family not in CHOICES:
        raise ValueError(f"family: {family!r} is none of {', '.join(CHOICES)}")
    if kv_heads < 1 or heads % kv_heads:
        raise ValueError(f"kv_heads: {kv_heads} does not divide heads={heads}")
    if family == "gpt2" and kv_heads != heads:
        raise ValueError(f"kv_heads: GPT-2 has no grouped-query attention, so kv_heads must equal heads={heads}")
    tok = tokenizer(demo_texts() if texts is None else tuple(texts), with_bos=family != "gpt2", vocab_size=vocab_size)
    ids = {"vocab_size": len(tok), "bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id}
    if family == "gpt2":
        config = transformers.GPT2Config(n_embd=hidden, n_layer=layers, n_head=heads, n_positions=max_positions, **ids)
    else:
        cls, extra = FAMILIES[family]
        config = cls(hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
                     num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=max_positions,
                     **{**ids, **extra})
    torch.manual_seed(seed)
    folder = Path(folder)
    transformers.AutoModel.from_config(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def main(argv: list[str] | None = None) -> int:
    """The command line: build the model, print what was written, return 0; a bad argument exits 2 with
    one ``error:`` line naming the option. ``argv``: the arguments (default: None, ``sys.argv[1:]``)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", help="the output folder, e.g. models/tiny-llama")
    p.add_argument("--family", default="llama", choices=CHOICES, help="model family (default: llama)")
    p.add_argument("--kv-heads", type=int, default=2, help="key/value heads; must divide --heads (default: 2)")
    p.add_argument("--heads", type=int, default=4, help="query heads per layer (default: 4)")
    p.add_argument("--layers", type=int, default=2, help="layers (default: 2)")
    p.add_argument("--hidden", type=int, default=32, help="hidden size (default: 32)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights (default: 0)")
    args = p.parse_args(argv)
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()  # one tiny file: no "Writing model shards" bar
    try:
        folder = build(args.folder, args.family, args.kv_heads, heads=args.heads, layers=args.layers,
                       hidden=args.hidden, seed=args.seed)
    except ValueError as err:
        p.error(str(err).replace("kv_heads", "--kv-heads").replace("heads=", "--heads "))
    finally:
        if bars:
            transformers.utils.logging.enable_progress_bar()
    config = transformers.AutoConfig.from_pretrained(folder)
    print(f"wrote {folder}/: {args.family}, {args.layers} layers x {args.heads} query heads sharing {args.kv_heads} "
          f"KV heads, hidden {args.hidden}, vocabulary {config.vocab_size}; "
          f"files: {', '.join(sorted(f.name for f in folder.iterdir()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
