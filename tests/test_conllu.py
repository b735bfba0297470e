"""Any CoNLL-U treebank as a corpus (``data=conllu``), and the CoNLL-U writer.

Fixtures: ``fixtures/ud_mini/en_mini-ud-{train,dev,test}.conllu`` (hand-written UD-style English:
multi-word tokens ``2-3 don't``, empty nodes ``5.1``, subtyped relations ``nsubj:pass``, XPOS ``_``
on every word) and ``fixtures/ud_multilingual.conllu`` (German with STTS XPOS and ``zum`` = ``zu
dem``, Chinese with CTB XPOS).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings

import fuzzing as fuzz  # the mutations of the reader fuzzing
from mtl_heads.config import ConfigError, load_config, CONFIG_DIR
from mtl_heads.data.conll2012 import read_conll2012
from mtl_heads.data.conllu import attach_conllu, read_conllu, write_conllu
from mtl_heads.data.corpus import load_corpus
from mtl_heads.data.errors import DataError
from mtl_heads.data.sentence import Sentence
from tasks.dep import DepTask, is_punct

FIXTURES = Path(__file__).parent / "fixtures"
MINI = FIXTURES / "ud_mini"
TRAIN, DEV, TEST = (MINI / f"en_mini-ud-{split}.conllu" for split in ("train", "dev", "test"))
MULTI = FIXTURES / "ud_multilingual.conllu"


def conllu_file(tmp_path: Path, rows: list[str], name: str = "x.conllu") -> Path:
    """A one-sentence CoNLL-U file from ``rows`` whose first nine ``|`` stand for tabs (MISC may hold ``|``)."""
    path = tmp_path / name
    path.write_text("# sent_id = 1\n" + "\n".join(row.replace("|", "\t", 9) for row in rows) + "\n\n", encoding="utf-8")
    return path


ROWS = ["1|John|John|PROPN|NNP|_|2|nsubj|_|_",
        "2|runs|run|VERB|VBZ|_|0|root|_|_",
        "3|.|.|PUNCT|.|_|2|punct|_|_"]


def with_cell(row: int, column: int, value: str, rows: list[str] = ROWS) -> list[str]:
    """``rows`` with one cell (0-based row and column) replaced."""
    cells = [r.split("|", 9) for r in rows]
    cells[row][column] = value
    return ["|".join(r) for r in cells]


# ---------------------------------------------------------------- reading


def test_multiword_tokens_read_as_their_syntactic_words():
    sentences = read_conllu(TRAIN)
    assert sentences[0].words == ["I", "do", "n't", "like", "cheese", "."]  # 2-3 don't
    assert sentences[0].heads == [4, 4, 4, 0, 4, 4]
    assert sentences[3].words == ["We", "'re", "here", "."]  # 1-2 We're
    assert sentences[0].source == f"{TRAIN}:4" and sentences[3].source.endswith(":36")  # the first word line, after the range
    assert [s.words for s in read_conllu(MULTI)][0] == ["Wir", "gehen", "zu", "dem", "Bahnhof", "."]  # zum


def test_empty_nodes_are_ignored():
    gapping = read_conllu(TRAIN)[2]  # 5.1 likes (enhanced graph only)
    assert gapping.words == ["Sue", "likes", "tea", "and", "Tom", "coffee", "."]
    assert gapping.heads == [2, 0, 2, 5, 2, 5, 2]
    assert gapping.rels == ["nsubj", "root", "obj", "cc", "conj", "orphan", "punct"]


def test_universal_and_full_relations():
    full = read_conllu(TRAIN)[1]
    universal = read_conllu(TRAIN, deprel="universal")[1]
    assert full.rels == ["det", "nsubj:pass", "aux:pass", "root", "case", "obl:agent", "punct"]
    assert universal.rels == ["det", "nsubj", "aux", "root", "case", "obl", "punct"]
    assert universal.heads == full.heads and universal.words == full.words
    with pytest.raises(ValueError, match="deprel='basic'"):
        read_conllu(TRAIN, deprel="basic")


def test_upos_and_xpos():
    german, _, chinese = read_conllu(MULTI)
    assert german.pos == ["PRON", "VERB", "ADP", "DET", "NOUN", "PUNCT"]
    assert read_conllu(MULTI, pos="xpos")[0].pos == ["PPER", "VVFIN", "APPR", "ART", "NN", "$."]
    assert chinese.words == ["我", "喜欢", "北京", "。"] and read_conllu(MULTI, pos="xpos")[2].pos == ["PN", "VV", "NR", "PU"]
    assert read_conllu(MULTI)[1].words == ["Die", "Straße", "ist", "schön", ",", "sagt", "Jürgen", "."]
    with pytest.raises(ValueError, match="pos='ptb'"):
        read_conllu(MULTI, pos="ptb")


def test_missing_column_declares_the_split_unannotated():
    # XPOS is '_' on every word of the fixture: no POS with pos=xpos, not a list of '_' tags
    assert all(s.pos is None for s in read_conllu(TRAIN, pos="xpos"))
    assert all(s.pos is not None and "_" not in s.pos for s in read_conllu(TRAIN, pos="upos"))
    corpus = load_corpus(conllu_config(["data.pos=xpos"]).data)
    assert all(s.pos is None and s.has("deps") for role in corpus.values() for s in role)


def test_missing_heads_and_sentence_level_layers(tmp_path):
    # a sentence whose HEAD and DEPREL are '_' everywhere has no dependencies; its neighbour keeps its own
    no_tree = [re.sub(r"\|\d\|(nsubj|root|punct)\|", "|_|_|", row) for row in ROWS]
    path = tmp_path / "mixed.conllu"
    path.write_text("\n".join(no_tree).replace("|", "\t") + "\n\n" + "\n".join(ROWS).replace("|", "\t") + "\n",
                    encoding="utf-8")
    first, second = read_conllu(path)
    assert first.heads is None and first.rels is None and first.pos == ["PROPN", "VERB", "PUNCT"]
    assert second.heads == [2, 0, 2]


@pytest.mark.parametrize("row, column, value, line, words", [
    (1, 3, "_", 3, "UPOS is missing ('_') on this word but given on other words of its sentence (line 2)"),
    (0, 6, "_", 2, "HEAD is missing ('_') on this word but given on other words of its sentence (line 3)"),
    (2, 7, "_", 4, "DEPREL '_' for head 2; expected a relation"),
    (1, 9, "NER=B-PER", 2, "MISC NER= is missing ('_') on this word"),
    (1, 9, "NER=X-PER", 3, "MISC NER='X-PER'; expected O, B-<label> or I-<label>"),
    (1, 9, "NER=O|NER=O", 3, "has 2 NER= items"),
    (0, 1, " ", 2, "FORM ' ' is empty"),
])
def test_partial_columns_are_errors_naming_the_line(tmp_path, row, column, value, line, words):
    path = conllu_file(tmp_path, with_cell(row, column, value))
    with pytest.raises(DataError) as error:
        read_conllu(path)
    assert str(error.value).startswith(f"{path}:{line}: ") and words in str(error.value), str(error.value)


def test_partial_xpos_is_an_error_only_when_xpos_is_read(tmp_path):
    path = conllu_file(tmp_path, with_cell(1, 4, "_"))
    assert read_conllu(path)[0].pos == ["PROPN", "VERB", "PUNCT"]
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}:3: XPOS is missing"):
        read_conllu(path, pos="xpos")


def test_ner_in_misc(tmp_path):
    rows = [("1", "John", "PROPN", "2", "nsubj", "SpaceAfter=No|NER=B-PER"),
            ("2", "Smith", "PROPN", "3", "flat", "NER=I-PER"),
            ("3", "visited", "VERB", "0", "root", "NER=O"),
            ("4", "New", "PROPN", "3", "obj", "NER=B-LOC|Gloss=new"),
            ("5", "York", "PROPN", "4", "flat", "NER=I-LOC"),
            ("6", ".", "PUNCT", "3", "punct", "NER=I-ORG")]  # I- without B-: starts an entity (conlleval)
    path = tmp_path / "ner.conllu"
    path.write_text("".join("\t".join([i, form, "_", upos, "_", "_", head, rel, "_", misc]) + "\n"
                            for i, form, upos, head, rel, misc in rows), encoding="utf-8")
    (sentence,) = read_conllu(path)
    assert sentence.entities == [(0, 2, "PER"), (3, 5, "LOC"), (5, 6, "ORG")]
    assert read_conllu(TRAIN)[0].entities is None  # no NER key anywhere: not annotated


def test_ewt_excerpt_reads_with_its_ranges_and_empty_nodes():
    sentences = read_conllu(FIXTURES / "ewt_excerpt.conllu")
    assert len(sentences) == 8 and sentences[0].pos == ["ADP", "DET", "PROPN", "VERB", "DET", "NOUN", "PUNCT"]
    assert read_conllu(FIXTURES / "ewt_excerpt.conllu", pos="xpos")[0].pos == ["IN", "DT", "NNP", "VBZ", "DT", "NN", ":"]


# ---------------------------------------------------------------- writing


def excerpt_with_everything() -> list[Sentence]:
    """The EWT excerpt: PTB POS, entities (dev/test have NER) and UD trees."""
    sentences = read_conll2012(FIXTURES / "ewt_excerpt.gold_conll")
    attach_conllu(sentences, read_conllu(FIXTURES / "ewt_excerpt.conllu"), FIXTURES / "ewt_excerpt.conllu")
    return sentences


def same(a: list[Sentence], b: list[Sentence]) -> bool:
    return [(s.words, s.pos, s.heads, s.rels, s.entities) for s in a] == \
        [(s.words, s.pos, s.heads, s.rels, s.entities) for s in b]


@pytest.mark.parametrize("column", ["upos", "xpos"])
def test_writer_round_trip(tmp_path, column):
    for name, sentences in (("mini", read_conllu(TRAIN, pos=column)), ("multi", read_conllu(MULTI, pos=column)),
                            ("ewt", excerpt_with_everything())):
        path = write_conllu(sentences, tmp_path / "out" / f"{name}.conllu", pos_column=column)
        assert same(read_conllu(path, pos=column), sentences), name
        other = "xpos" if column == "upos" else "upos"
        assert all(s.pos is None for s in read_conllu(path, pos=other)), name
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["ewt.conllu", "mini.conllu", "multi.conllu"]


def test_writer_columns(tmp_path):
    sentences = excerpt_with_everything()
    assert any(s.entities for s in sentences) and any(s.entities == [] for s in sentences)
    path = write_conllu(sentences, tmp_path / "ewt.conllu")
    lines = path.read_text(encoding="utf-8").split("\n")
    assert lines[:2] == ["# sent_id = 1", "# text = From the AP comes this story :"]
    assert lines[2].split("\t") == ["1", "From", "_", "IN", "_", "_", "3", "case", "_", "NER=O"]
    assert "\t".join(["3", "AP", "_", "NNP", "_", "_", "4", "obl", "_", "NER=B-ORG"]) in lines
    assert read_conllu(path, pos="upos")[0].pos == ["IN", "DT", "NNP", "VBZ", "DT", "NN", ":"]  # the column given
    # sentences without a layer: '_' there, read back without it
    bare = [Sentence(words=["Grüße", "aus", "Köln"]), Sentence(words=["x"], pos=["X"], entities=[], heads=[0], rels=["root"])]
    path = write_conllu(bare, tmp_path / "bare.conllu", pos_column="xpos")
    assert path.read_text(encoding="utf-8").split("\n")[2] == "1\tGrüße\t_\t_\t_\t_\t_\t_\t_\t_"
    assert same(read_conllu(path, pos="xpos"), bare)


@pytest.mark.parametrize("sentence, words", [
    (Sentence(words=["a", "b"], entities=[(0, 2, "PER"), (1, 2, "LOC")]), "overlaps"),
    (Sentence(words=["a\tb"]), "cannot be written"),
    (Sentence(words=[]), "at least one word"),
    (Sentence(words=["a", "b"], pos=["DT", "_"]), "'_' would read back"),
    (Sentence(words=["a", "b"], heads=[2, 1], rels=["x", "y"]), "not a tree"),
    (Sentence(words=["a", "b"], heads=[0, 1], rels=["root", "bad rel"]), "cannot be written"),
])
def test_writer_refuses_what_conllu_cannot_hold(tmp_path, sentence, words):
    good = Sentence(words=["ok"])
    with pytest.raises(ValueError, match=words):
        write_conllu([good, sentence], tmp_path / "bad.conllu")
    with pytest.raises(ValueError, match="pos_column"):
        write_conllu([good], tmp_path / "bad.conllu", pos_column="auto")
    assert not list(tmp_path.iterdir())  # nothing written, no temporary file left


# ---------------------------------------------------------------- the DEP metric's punctuation


def test_punctuation_whichever_tag_set():
    assert is_punct(".", "PUNCT") and is_punct(",", ",") and is_punct("-", "HYPH")  # UPOS, PTB
    assert not is_punct("$", "SYM") and not is_punct("%", "SYM") and not is_punct("$", "$")
    assert is_punct(".", "$.") and is_punct("。", "PU") and not is_punct("Bahnhof", "NN")  # STTS, CTB: by characters
    german, _, chinese = read_conllu(MULTI, pos="xpos")
    assert DepTask().gold(german).punct == [False] * 5 + [True]
    assert DepTask().gold(chinese).punct == [False, False, False, True]
    upos = read_conllu(MULTI)
    assert [DepTask().gold(s).punct for s in upos] == [DepTask().gold(s).punct for s in read_conllu(MULTI, pos="xpos")]


# ---------------------------------------------------------------- data=conllu


def conllu_config(extra: list[str], base: Path = CONFIG_DIR / "train.yaml"):
    return load_config(["data=conllu", f"data.train={TRAIN}", f"data.dev={DEV}", f"data.test={TEST}"] + extra, base=base)


def test_data_conllu_by_files_and_by_folder(tmp_path):
    by_files = load_corpus(conllu_config([]).data)
    assert [len(by_files[r]) for r in ("train", "dev", "test")] == [8, 3, 3]
    assert by_files["train"][0].pos[0] == "PRON" and by_files["train"][1].rels[1] == "nsubj:pass"
    by_folder = load_corpus(load_config(["data=conllu", f"data.path={MINI}", "data.deprel=universal"]).data)
    assert same(by_folder["test"], read_conllu(TEST, deprel="universal"))
    swapped = load_corpus(load_config(["data=conllu", f"data.path={MINI}", "data.splits={train: dev}"]).data)
    assert same(swapped["train"], by_files["dev"])
    no_deps = load_corpus(conllu_config(["data.deps=none"]).data)
    assert not any(s.has("deps") for s in no_deps["train"]) and all(s.has("pos") for s in no_deps["train"])
    # probe.yaml has the same data keys
    probe = load_corpus(conllu_config(["data.pos=upos"], base=CONFIG_DIR / "probe.yaml").data)
    assert same(probe["test"], by_files["test"])


def test_data_conllu_errors_name_the_key(tmp_path):
    (tmp_path / "a-ud-train.conllu").write_bytes(TRAIN.read_bytes())
    (tmp_path / "b-ud-train.conllu").write_bytes(TRAIN.read_bytes())
    (tmp_path / "a-ud-test.conllu").write_bytes(TEST.read_bytes())
    cases = [
        (["data=conllu", f"data.path={tmp_path}"], r"'data.path': 2 files match \*-ud-train.conllu .*a-ud-train.conllu, "
                                                   r"b-ud-train.conllu\); expected one: use data.train=<file>"),
        (["data=conllu", f"data.path={tmp_path}", f"data.train={TRAIN}"], r"'data.path': no file matching \*-ud-dev.conllu"),
        (["data=conllu", f"data.path={TRAIN}"], r"'data.path': .* is a file; expected a UD treebank folder"),
        (["data=conllu"], r"'data.path' \(or data.train\): needed for data.format=conllu"),
        (["data=conllu", f"data.path={MINI}", "data.deps=converted"], r"'data.deps': converted needs constituency trees"),
        (["data.pos=upos"], r"'data.pos': upos needs CoNLL-U files"),
        (["data.deprel=universal"], r"'data.deprel': universal strips the subtypes"),
    ]
    for overrides, message in cases:
        with pytest.raises(ConfigError, match=message):
            load_corpus(load_config(overrides).data)
    with pytest.raises(ConfigError, match=r"config key 'data.pos': expected one of auto, upos, xpos, got 'ptb'"):
        load_config(["data=conllu", "data.pos=ptb"])
    with pytest.raises(ConfigError, match=r"config key 'data.deprel': expected one of full, universal"):
        load_config(["data.deprel=basic"])


def test_ewt_format_takes_upos_and_universal_relations_from_its_conllu(tmp_path):
    for split in ("train", "dev", "test"):
        (tmp_path / f"en_ewt.{split}.gold_conll").write_bytes((FIXTURES / "ewt_excerpt.gold_conll").read_bytes())
        (tmp_path / f"en_ewt.{split}.conllu").write_bytes((FIXTURES / "ewt_excerpt.conllu").read_bytes())
    default = load_corpus(load_config(["data=ewt", f"data.path={tmp_path}"]).data)["dev"]
    upos = load_corpus(load_config(["data=ewt", f"data.path={tmp_path}", "data.pos=upos",
                                    "data.deprel=universal"]).data)["dev"]
    assert default[0].pos == ["IN", "DT", "NNP", "VBZ", "DT", "NN", ":"]  # PTB tags, as before
    assert upos[0].pos == ["ADP", "DET", "PROPN", "VERB", "DET", "NOUN", "PUNCT"]
    assert upos[0].tree == default[0].tree and upos[0].entities == default[0].entities
    assert any(":" in r for s in default for r in s.rels) and not any(":" in r for s in upos for r in s.rels)
    # punctuation is the same words under either tag set on these sentences
    assert [DepTask().gold(s).punct for s in default] == [DepTask().gold(s).punct for s in upos]
    converted = load_corpus(load_config(["data=ewt", f"data.path={tmp_path}", "data.deps=converted",
                                         "data.pos=upos"]).data)["dev"]
    assert converted[0].pos[0] == "ADP" and converted[0].has("deps")


# ---------------------------------------------------------------- robustness, other languages


@settings(max_examples=120, **fuzz.FUZZ)
@given(content=fuzz.mutated(TRAIN.read_bytes(), b"\t", fuzz.KINDS, at_most=3))
def test_fuzzed_mini_fixture_reads_or_names_the_line(tmp_path_factory, content):
    path = tmp_path_factory.getbasetemp() / "fuzz-ud-mini.conllu"
    fuzz.check(lambda: read_conllu(path, pos="xpos", deprel="universal"), {path: content})


@settings(max_examples=60, **fuzz.FUZZ)
@given(content=fuzz.mutated(MULTI.read_bytes(), b"\t", fuzz.KINDS, at_most=2))
def test_fuzzed_multilingual_fixture_reads_or_names_the_line(tmp_path_factory, content):
    path = tmp_path_factory.getbasetemp() / "fuzz-ud-multi.conllu"
    fuzz.check(lambda: read_conllu(path), {path: content})


def test_multilingual_words_reach_the_tokenizer(tiny_encoder_dir):
    from transformers import AutoTokenizer

    from mtl_heads.data.batching import tokenize

    sentences = read_conllu(MULTI)
    examples, report = tokenize(sentences, AutoTokenizer.from_pretrained(str(tiny_encoder_dir)), 128)
    assert len(examples) == 3 and report.skipped == 0


# ---------------------------------------------------------------- end to end


def test_train_on_a_conllu_treebank(tiny_encoder_dir, tmp_path):
    from mtl_heads.training.experiment import run

    out = tmp_path / "run"
    metrics = run([f"encoder.name={tiny_encoder_dir}", "data=conllu", f"data.train={TRAIN}", f"data.dev={DEV}",
                   f"data.test={TEST}", "tasks=pos,dep", "train.epochs=1", "train.batch_size=4",
                   "wandb.mode=disabled", "train.progress=false", f"run_dir={out}"])
    assert 0 <= metrics["test"]["pos"]["accuracy"] <= 100 and 0 <= metrics["test"]["dep"]["las"] <= 100
    assert metrics["test"]["dep"]["words"] == 3 + 6 + 3  # the 15 test words less 3 PUNCT
    labels = json.loads((out / "labels.json").read_text())
    assert "nsubj:pass" in labels["dep"] and "PROPN" in labels["pos"]
    assert metrics["sentences"]["train"] == {"pos": 8, "dep": 8}


def test_ewt_dev_as_a_conllu_treebank(ewt):
    dev = ewt / "en_ewt.dev.conllu"
    corpus = load_corpus(load_config(["data=conllu", f"data.train={dev}", f"data.dev={dev}", f"data.test={dev}"]).data,
                         {"pos", "deps"})
    sentences = corpus["dev"]
    assert len(sentences) == 1968 and all(s.has("pos") and s.has("deps") and s.entities is None for s in sentences)
    gold = read_conll2012(ewt / "en_ewt.dev.gold_conll")
    assert [s.words for s in sentences] == [s.words for s in gold]  # the syntactic words of the 356 ranges
    assert sum(len(s.words) for s in sentences) == 24892
    assert {t for s in sentences for t in s.pos} <= {"ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM",
                                                     "PART", "PRON", "PROPN", "PUNCT", "SCONJ", "SYM", "VERB", "X"}
