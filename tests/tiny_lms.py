"""Tiny random decoder LMs, each built by the decoder guide's docs/guides/tiny_lm.py and saved to a folder
(conftest's ``folders`` fixture makes them once per module); shared by the decoder LM, decoder head removal,
ablation, attention view and causal probe tests."""
from __future__ import annotations

import importlib.util

import torch
from helpers import REPO

from mtl_heads.model.encoder import GatedEncoder

SENTENCES = [
    "The dog saw a cat in the park .",
    "Mary and John walked to the old house yesterday .",
    "A company said its profits rose sharply in the third quarter .",
    "They will meet the new president of the bank on Monday .",
]
HEADS = 4  # query heads of every tiny decoder LM


def _tiny_lm():
    """docs/guides/tiny_lm.py, the decoder guide's model builder: the recipe of every model here."""
    spec = importlib.util.spec_from_file_location("tiny_lm", REPO / "docs" / "guides" / "tiny_lm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tiny_lm = _tiny_lm()
FAMILIES = tiny_lm.FAMILIES  # family -> (config class, extra kwargs)
# every family with num_key_value_heads gets GQA ratios 1, 2, 4
CASES = [(f, kv) for f in FAMILIES for kv in (4, 2, 1)] + [("gpt2", 4)]


def _save(folder, family: str, kv_heads: int):
    """A 2-layer, 4-query-head random model of ``family`` with ``kv_heads`` KV heads, saved with its
    tokenizer: a byte-level BPE over the sentences above, Llama-style (``<s>`` put first) or, for
    GPT-2, without BOS and without a pad token (the loader sets pad = eos)."""
    return tiny_lm.build(folder, family, kv_heads, heads=HEADS, layers=2, hidden=32, intermediate=64,
                         max_positions=64, texts=tuple(SENTENCES), vocab_size=320, seed=0)


def _batch(encoder: GatedEncoder):
    """Two sentences (5 and 3 words) through ``encoder``'s tokenizer: input ids, attention mask, word index of
    each piece (-1 for specials and padding), word mask."""
    words = [["The", "dog", "walked", "yesterday", "."], ["Mary", "saw", "profits"]]
    enc = encoder.tokenizer(words, is_split_into_words=True, padding=True, return_tensors="pt")
    index = torch.tensor([[-1 if w is None else w for w in enc.word_ids(i)] for i in range(len(words))])
    index = index.masked_fill(enc["attention_mask"] == 0, -1)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    return enc["input_ids"], enc["attention_mask"], index, mask
