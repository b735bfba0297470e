"""Sub-word alignment, the long-sentence policy, batching and the MTL schedule."""
import random
from collections import Counter

import pytest
from transformers import AutoTokenizer

from mtl_heads.data.batching import (collate, epoch_plan, length_batches, task_probabilities, tokenize)
from mtl_heads.data.sentence import Sentence


@pytest.fixture(scope="module")
def tokenizer(tiny_encoder_dir):
    return AutoTokenizer.from_pretrained(tiny_encoder_dir)


def test_alignment_maps_pieces_to_words(tokenizer):
    s = Sentence(words=["Unbelievably", "tokenised", "words", "."], pos=["RB", "VBN", "NNS", "."])
    (ex,), report = tokenize([s], tokenizer, max_length=64)
    assert ex.word_index[0] == -1 and ex.word_index[-1] == -1          # [CLS] ... [SEP]
    inner = ex.word_index[1:-1]
    assert inner == sorted(inner) and set(inner) == {0, 1, 2, 3}
    pieces = tokenizer.convert_ids_to_tokens(ex.input_ids[1:-1])
    first = "".join(p.removeprefix("##") for p, w in zip(pieces, inner) if w == 0)
    assert first == "unbelievably" and report.sentences == 1


def test_word_without_pieces_becomes_unknown(tokenizer):
    s = Sentence(words=["a", "\u200b", "b"])
    (ex,), report = tokenize([s], tokenizer, max_length=64)
    assert set(ex.word_index) - {-1} == {0, 1, 2} and report.empty_words == 1


def test_long_sentences_skip_and_split_are_counted(tokenizer):
    long = Sentence(words=[f"w{i}" for i in range(40)], pos=["NN"] * 40, entities=[(9, 12, "ORG")])
    short = Sentence(words=["a", "b"], pos=["DT", "NN"], entities=[])
    kept, report = tokenize([long, short], tokenizer, max_length=32, policy="skip")
    assert [e.sentence for e in kept] == [short] and report.too_long == 1 and report.skipped == 1
    pieces, report = tokenize([long, short], tokenizer, max_length=32, policy="split")
    assert report.split == 1 and report.pieces == len(pieces) - 1 >= 2
    words = [w for e in pieces[:-1] for w in e.sentence.words]
    assert words == long.words and all(len(e.input_ids) <= 32 for e in pieces)
    entities = [(e.sentence.words[s], e.sentence.words[t - 1], label) for e in pieces[:-1] for s, t, label in e.sentence.entities]
    assert entities == [("w9", "w11", "ORG")]  # the cut avoided the entity
    assert "too_long" not in report.lines()[0] and any("split" in line for line in report.lines())
    with pytest.raises(ValueError, match="long_policy"):
        tokenize([short], tokenizer, 32, policy="truncate")


def test_length_batches_cover_every_example_once():
    lengths = [random.Random(i).randint(3, 50) for i in range(103)]
    for rng in (None, random.Random(0)):
        batches = length_batches(lengths, 8, rng)
        flat = sorted(i for b in batches for i in b)
        assert flat == list(range(103)) and all(len(b) <= 8 for b in batches)


def test_collate_shapes_and_masks(tokenizer):
    sents = [Sentence(words=["a", "b", "c"]), Sentence(words=["d"])]
    examples, _ = tokenize(sents, tokenizer, 64)
    batch = collate(examples, tokenizer.pad_token_id)
    assert batch["input_ids"].shape == batch["word_index"].shape == batch["attention_mask"].shape
    assert batch["word_mask"].tolist() == [[True, True, True], [True, False, False]]
    assert batch["word_index"][1].tolist()[: len(examples[1].word_index)] == examples[1].word_index
    assert (batch["word_index"][1, len(examples[1].word_index):] == -1).all()


def test_task_sampling_follows_batches_to_the_power_alpha():
    probs = task_probabilities({"a": 100, "b": 25}, 0.8)
    assert probs["a"] / probs["b"] == pytest.approx(4 ** 0.8)
    batches = {"a": [[i] for i in range(100)], "b": [[i] for i in range(25)]}
    picks = Counter()
    for seed in range(40):
        plan = epoch_plan(batches, 0.8, random.Random(seed))
        assert len(plan) == 125
        picks.update(t for t, _ in plan)
    assert picks["a"] / sum(picks.values()) == pytest.approx(probs["a"], abs=0.01)
    assert epoch_plan(batches, 0.8, random.Random(3)) == epoch_plan(batches, 0.8, random.Random(3))
    # a single task (STL) is every batch once
    assert sorted(b[0] for _, b in epoch_plan({"a": batches["a"]}, 0.8, random.Random(1))) == list(range(100))
