"""Prediction: the Predictor API, ``Task.annotate`` (the inverse of ``Task.gold``), one encoder pass
per batch, every input and output format of ``python -m mtl_heads predict``, too-long sentences,
bad input, and a removal folder. One tiny five-task run, trained once for the module."""
from __future__ import annotations

import json
import re
import shutil

import nltk
import pytest
from omegaconf import OmegaConf

from mtl_heads.data.batching import collate, tokenize
from mtl_heads.data.conll2012 import read_conll2012, write_conll2012
from mtl_heads.data.conllu import read_conllu
from mtl_heads.data.errors import DataError
from mtl_heads.data.formats import format_by_name, input_format, output_format
from mtl_heads.data.sentence import Sentence
from mtl_heads.data.text import read_conllu_words, read_jsonl, read_text, tokenize_text
from mtl_heads.data.trees import bio_to_spans
from mtl_heads.analysis.inference import Predictor
from mtl_heads.commands.predict import main
from tasks.con import BracketF1
from tasks.ner import spans_to_bio
from helpers import TINY_RUN

TASKS = ["pos", "ner", "dep", "con", "srl"]
SENTENCES = [
    "John Smith lives in New York .".split(),
    "The cat sat on the mat .".split(),
    "She said that the results , which were surprising , held up .".split(),
    "Heads can be removed .".split(),
    "In 1998 , the company moved from Boston to Chicago and hired forty people .".split(),
    "Yes .".split(),
]
LONG = ["word"] * 200  # over the tiny encoder's limit of 128 sub-words


@pytest.fixture(scope="module")
def run_dir(tiny_runs):
    """A 1-epoch five-task run on the tiny random encoder (2 layers x 4 heads, 128 sub-words; helpers.TINY_RUN),
    shared with test_evaluate's."""
    return tiny_runs(*TINY_RUN, "tasks=pos,ner,dep,con,srl")  # the same arguments as test_evaluate's: one run


@pytest.fixture(scope="module")
def predictor(run_dir):
    return Predictor.load(run_dir, device="cpu")


@pytest.fixture(scope="module")
def expected(predictor):
    """The API's predictions for SENTENCES, batched as the command batches them (one batch)."""
    return predictor.predict(SENTENCES)


def layers(sentence: Sentence) -> dict:
    return {k: getattr(sentence, k) for k in ("pos", "entities", "heads", "rels", "tree", "predicates", "arguments")}


def cli(capsys, *args) -> tuple[int, str, str]:
    code = main([str(a) for a in args] + ["progress=false"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --- the API ----------------------------------------------------------------------------------
def test_predict_a_string_a_token_list_and_many(predictor):
    one = predictor.predict('He said, "I can\'t go."')
    assert one.words == ["He", "said", ",", '"', "I", "ca", "n't", "go", ".", '"']
    assert predictor.tasks == TASKS
    for layer in ("pos", "entities", "deps", "tree", "srl"):
        assert one.has(layer), layer
    assert len(one.pos) == len(one.heads) == len(one.rels) == 10 and one.tree.leaves() == one.words
    assert [tag for _, tag in one.tree.pos()] == one.pos  # CON preterminals = the predicted POS

    tokens = predictor.predict(["The", "cat", "sat", "."])
    assert isinstance(tokens, Sentence) and tokens.words == ["The", "cat", "sat", "."]

    many = predictor.predict([["A", "dog", "."], "Raw text two.", Sentence(words=["x", "y"], pos=["GOLD", "GOLD"])])
    assert [s.words for s in many] == [["A", "dog", "."], ["Raw", "text", "two", "."], ["x", "y"]]
    assert many[2].pos != ["GOLD", "GOLD"] and all(s.has("deps") for s in many)  # input layers are not copied
    assert predictor.predict([]) == []

    texts, stats = predictor.predict_sentences(["Raw one .", "Raw two ."])  # here a string is a sentence
    assert [s.words for s in texts] == [["Raw", "one", "."], ["Raw", "two", "."]] and stats.sentences == 2


def test_subset_of_tasks_and_con_without_pos(run_dir):
    only = Predictor.load(run_dir, device="cpu", tasks="con,dep")
    s = only.predict("The cat sat .")
    assert only.tasks == ["con", "dep"] and s.pos is None and s.entities is None and s.predicates is None
    assert {tag for _, tag in s.tree.pos()} == {"_"} and s.tree.leaves() == s.words  # CON's own dummy tags


def test_bad_api_input(predictor, run_dir):
    with pytest.raises(DataError, match="sentence 2: word 1"):
        predictor.predict([["ok"], ["has space"]])
    with pytest.raises(DataError, match="sentence 1: "):
        predictor.predict([[""]])
    with pytest.raises(DataError, match="holds no word"):
        predictor.predict("   ")
    from mtl_heads.config import ConfigError

    with pytest.raises(ConfigError, match="config key 'tasks'.*not on"):
        Predictor.load(run_dir, device="cpu", tasks=["pos", "chunk"])


def test_annotate_is_the_inverse_of_gold(predictor):
    model, tasks = predictor.model, predictor.model.tasks
    sentences = [Sentence(words=w) for w in SENTENCES]
    examples, _ = tokenize(sentences, model.encoder.tokenizer, model.encoder.max_length)
    predictions = model.decode_all(collate(examples, model.encoder.tokenizer.pad_token_id), TASKS)
    for i, words in enumerate(SENTENCES):
        s = Sentence(words=list(words))
        for name in TASKS:  # pos before con, as the predictor does
            tasks[name].annotate(s, predictions[name][i])
        pos, ner, dep, con, srl = (predictions[name][i] for name in TASKS)
        assert tasks["pos"].gold(s) == pos
        assert tasks["ner"].gold(s) == spans_to_bio(bio_to_spans(ner), len(words))  # conlleval reading of the BIO
        assert bio_to_spans(tasks["ner"].gold(s)) == bio_to_spans(ner)
        assert tasks["dep"].gold(s)[:2] == dep[:2]  # heads, rels (punct is recomputed)
        assert _skeleton(tasks["con"].gold(s)) == _skeleton(con)  # same brackets; leaves = words now
        metric = BracketF1()
        metric.update([con], [tasks["con"].gold(s)])
        assert metric.compute()["complete_match"] == 100.0
        assert tasks["srl"].gold(s) == srl


def test_ner_annotate_reads_bio_as_conlleval():
    from tasks.ner import NerTask

    s = Sentence(words=list("abcde"))
    NerTask().annotate(s, ["I-PER", "I-PER", "O", "B-ORG", "I-LOC"])
    assert s.entities == [(0, 2, "PER"), (3, 4, "ORG"), (4, 5, "LOC")]
    assert NerTask().gold(s) == ["B-PER", "I-PER", "O", "B-ORG", "B-LOC"]
    NerTask().annotate(s, [(1, 3, "GPE")])  # spans are taken as they are
    assert s.entities == [(1, 3, "GPE")]


def test_base_annotate_names_the_task():
    from tasks.base import Task

    class Chunk(Task):
        name = "chunk"

    with pytest.raises(NotImplementedError, match="chunk"):
        Chunk().annotate(Sentence(words=["a"]), ["X"])


def _skeleton(tree: nltk.Tree) -> nltk.Tree:
    """The tree with leaves numbered and preterminals ``_``: its brackets only."""
    tree = tree.copy(deep=True)
    for i, position in enumerate(tree.treepositions("leaves")):
        tree[position] = str(i)
        tree[position[:-1]].set_label("_")
    return tree


def test_one_encoder_pass_per_batch_and_input_order(predictor, expected):
    calls = []
    handle = predictor.model.encoder.register_forward_hook(lambda *args: calls.append(1))
    try:
        order = [2, 5, 0, 4, 1, 3, 2, 5]  # lengths 13, 2, 7, 15, 7, 4, ... and a repeat: sorting reorders
        out, stats = predictor.predict_sentences([SENTENCES[i] for i in order], batch_size=3)
    finally:
        handle.remove()
    assert len(calls) == stats.batches == 3  # 8 sentences, batches of 3: one pass feeds all five decoders
    assert [s.words for s in out] == [SENTENCES[i] for i in order]
    assert all(len(s.pos) == len(s.words) and s.has("srl") for s in out)
    assert stats.sentences == 8 and stats.words == sum(len(SENTENCES[i]) for i in order)
    assert stats.sentences_per_second > 0 and stats.words_per_second > 0


def test_decode_all_equals_decode_per_task(predictor):
    model = predictor.model
    examples, _ = tokenize([Sentence(words=w) for w in SENTENCES], model.encoder.tokenizer, model.encoder.max_length)
    batch = collate(examples, model.encoder.tokenizer.pad_token_id)
    together = model.decode_all(batch, TASKS)
    assert set(together) == set(TASKS)
    for name in TASKS:
        assert together[name] == model.decode(batch, name), name
    with pytest.raises(KeyError, match="chunk"):
        model.decode_all(batch, ["chunk"])


def test_too_long_sentence_is_kept_with_empty_layers(predictor):
    out, stats = predictor.predict_sentences([SENTENCES[0], LONG, SENTENCES[1]])
    assert [s.words for s in out] == [SENTENCES[0], LONG, SENTENCES[1]]
    assert stats.too_long == 1 and "1 skipped as too long" in stats.lines()[0]
    assert all(value is None for value in layers(out[1]).values())
    assert out[0].has("pos") and out[2].has("srl")


def test_split_policy_joins_word_level_layers(run_dir):
    split = Predictor.load(run_dir, device="cpu", long_policy="split")
    out, stats = split.predict_sentences([LONG, SENTENCES[0]])
    assert stats.too_long == 1 and stats.pieces >= 2
    assert len(out[0].pos) == len(LONG) and out[0].entities is not None
    assert out[0].tree is None and out[0].heads is None and out[0].predicates is None


def test_word_without_sub_word_is_fed_as_unknown(predictor):
    out, stats = predictor.predict_sentences([["a", "\u200b", "b"]])
    assert stats.empty_words == 1 and len(out[0].pos) == 3


# --- readers and format names -----------------------------------------------------------------
def test_tokenizer_keeps_characters_and_splits_ptb_style():
    assert tokenize_text("He said, \"I can't (really) go to the U.S.\" ok?") == [
        "He", "said", ",", '"', "I", "ca", "n't", "(", "really", ")", "go", "to", "the", "U.S.", '"', "ok", "?"]


def test_ptb_lines_escape_brackets_and_leave_treeless_sentences_empty(tmp_path):
    from mtl_heads.data.formats import write_ptb

    tree = nltk.Tree.fromstring("(TOP (S (NP (-LRB- LEFT)) (VP (VBD left)) (. RIGHT)))")
    tree[0, 0, 0][0], tree[0, 2][0] = "(", ":)"
    write_ptb([Sentence(words=["(", "left", ":)"], tree=tree), Sentence(words=["x"])], tmp_path / "o.ptb")
    assert (tmp_path / "o.ptb").read_text(encoding="utf-8") == (
        "(TOP (S (NP (-LRB- -LRB-)) (VP (VBD left)) (. :-RRB-)))\n\n")


def test_format_names():
    assert [format_by_name(n) for n in ("a.conll", "a.gold_conll", "a_conll", "a.conllu", "a.ptb", "a.trees",
                                        "a.jsonl", "a.txt", "a.out")] == [
        "conll2012", "conll2012", "conll2012", "conllu", "ptb", "ptb", "jsonl", "text", None]
    assert input_format("notes.md") == "text" and output_format("x.out", "jsonl") == "jsonl"
    from mtl_heads.config import ConfigError

    with pytest.raises(ConfigError, match="config key 'format'"):
        output_format("x.txt")


def test_readers(tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("First line here.\n\n  \nSecond  one\n", encoding="utf-8")
    got = read_text(text)
    assert [s.words for s in got] == [["First", "line", "here", "."], ["Second", "one"]]
    assert [s.source for s in got] == [f"{text}:1", f"{text}:4"]  # blank lines skipped, lines kept
    assert [s.words for s in read_text(text, tokenized=True)][0] == ["First", "line", "here."]

    conllu = tmp_path / "in.conllu"
    conllu.write_text("# sent_id = 1\n1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n1\tdo\t_\t_\t_\t_\t_\t_\t_\t_\n"
                      "2\tn't\t_\t_\t_\t_\t_\t_\t_\t_\n3\tgo\t_\t_\t_\t_\t_\t_\t_\t_\n\n1\tYes" + "\t_" * 8 + "\n",
                      encoding="utf-8")
    assert [s.words for s in read_conllu_words(conllu)] == [["do", "n't", "go"], ["Yes"]]
    conllu.write_text("# c\n1\tThe\tthe\tDET\n2\tcat\tcat\tNOUN\n", encoding="utf-8")  # issue 53, item 3
    with pytest.raises(DataError, match=f"^{re.escape(str(conllu))}:2: line has 4 tab-separated columns; expected 10$"):
        read_conllu_words(conllu)

    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text('{"words": ["A", "b"]}\n\n{"text": "Raw (text)."}\n', encoding="utf-8")
    assert [s.words for s in read_jsonl(jsonl)] == [["A", "b"], ["Raw", "(", "text", ")", "."]]


# --- the command: every input format ----------------------------------------------------------
def write_inputs(folder) -> dict:
    """The same SENTENCES in every input format."""
    files = {"text": folder / "in.txt", "tokens": folder / "tok.txt", "conllu": folder / "in.conllu",
             "conll2012": folder / "in.gold_conll", "jsonl": folder / "in.jsonl"}
    files["text"].write_text("\n".join(" ".join(w) for w in SENTENCES) + "\n", encoding="utf-8")
    files["tokens"].write_text("\n\n".join(" ".join(w) for w in SENTENCES) + "\n", encoding="utf-8")
    files["conllu"].write_text("".join("".join(f"{i + 1}\t{w}\t_\t_\t_\t_\t_\t_\t_\t_\n" for i, w in enumerate(words))
                                       + "\n" for words in SENTENCES), encoding="utf-8")
    write_conll2012([Sentence(words=w, pos=["NN"] * len(w)) for w in SENTENCES], files["conll2012"])
    files["jsonl"].write_text("".join(json.dumps({"words": w} if i % 2 else {"text": " ".join(w)}) + "\n"
                                      for i, w in enumerate(SENTENCES)), encoding="utf-8")
    return files


@pytest.mark.parametrize("kind", ["text", "tokens", "conllu", "conll2012", "jsonl"])
def test_cli_reads_every_input_format(kind, run_dir, expected, tmp_path, capsys):
    source = write_inputs(tmp_path)[kind]
    out = tmp_path / "out.jsonl"
    extra = ["input.tokenized=true"] if kind == "tokens" else []
    code, printed, err = cli(capsys, run_dir, f"input={source}", f"out={out}", *extra)
    assert code == 0, err
    got = read_jsonl(out)
    assert [s.words for s in got] == SENTENCES
    assert [layers(s) for s in got] == [layers(s) for s in expected]
    assert f"{len(SENTENCES)} sentences" in printed and "0 skipped as too long" in printed
    assert "sentences/s" in printed and "words/s" in printed and str(out) in printed


# --- the command: every output format, read back ----------------------------------------------
def test_cli_conll2012_output_reads_back(run_dir, expected, tmp_path, capsys):
    source = write_inputs(tmp_path)["text"]
    code, printed, err = cli(capsys, run_dir, f"input={source}", f"out={tmp_path / 'out.conll'}")
    assert code == 0, err
    assert "conll2012 has no place for dep" in err
    back = read_conll2012(tmp_path / "out.conll")
    for got, want in zip(back, expected, strict=True):
        assert got.words == want.words and got.pos == want.pos and got.tree == want.tree
        assert got.entities == want.entities
        assert (got.predicates, got.arguments) == (want.predicates, want.arguments)


def test_cli_conllu_output_reads_back(run_dir, predictor, expected, tmp_path, capsys):
    source = write_inputs(tmp_path)["text"]
    code, _, err = cli(capsys, run_dir, f"input={source}", f"out={tmp_path / 'out.conllu'}")
    assert code == 0, err
    assert predictor.pos_column == "xpos"  # the demo corpus: PTB tags
    back = read_conllu(tmp_path / "out.conllu", pos=predictor.pos_column)
    for got, want in zip(back, expected, strict=True):
        assert (got.words, got.pos, got.heads, got.rels, got.entities) == (
            want.words, want.pos, want.heads, want.rels, want.entities)


def test_cli_jsonl_and_ptb_outputs_read_back(run_dir, expected, tmp_path, capsys):
    source = write_inputs(tmp_path)["text"]
    assert cli(capsys, run_dir, f"input={source}", f"out={tmp_path / 'out.jsonl'}")[0] == 0
    assert cli(capsys, run_dir, f"input={source}", f"out={tmp_path / 'out.trees'}", "tasks=pos,con")[0] == 0
    back = read_jsonl(tmp_path / "out.jsonl")
    lines = (tmp_path / "out.trees").read_text(encoding="utf-8").splitlines()
    assert len(back) == len(lines) == len(expected)
    assert json.loads((tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()[0])["source"] == f"{source}:1"
    for got, line, w in zip(back, lines, expected):
        assert got == w  # every layer (Sentence == leaves out the source)
        tree = nltk.Tree.fromstring(line)
        for position, word in zip(tree.treepositions("leaves"), got.words):
            tree[position] = word
        assert tree == w.tree


def test_cli_too_long_sentence_is_written_empty_and_counted(run_dir, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text(" ".join(SENTENCES[0]) + "\n" + " ".join(LONG) + "\n", encoding="utf-8")
    code, printed, err = cli(capsys, run_dir, f"input={source}", f"out={tmp_path / 'out.jsonl'}")
    assert code == 0, err
    assert "1 skipped as too long" in printed
    back = read_jsonl(tmp_path / "out.jsonl")
    assert back[1].words == LONG and all(v is None for v in layers(back[1]).values()) and back[0].pos
    assert cli(capsys, run_dir, f"input={source}", f"out={tmp_path / 'out.conll'}")[0] == 0
    conll = read_conll2012(tmp_path / "out.conll")
    assert len(conll) == 2 and conll[1].tree is None and conll[1].entities is None and conll[1].predicates == []
    # CoNLL-U: the long sentence's columns are '_', which read back as "not annotated"
    code, _, err = cli(capsys, run_dir, f"input={source}", f"out={tmp_path / 'out.conllu'}")
    assert code == 0, err
    first, long = read_conllu(tmp_path / "out.conllu", pos="xpos")
    assert long.words == LONG and long.pos is None and long.heads is None and long.entities is None
    assert first.pos and first.heads and first.entities is not None
    code, _, err = cli(capsys, run_dir, f"input={source}", f"out={tmp_path / 'out.conllu'}", "tasks=pos,ner",
                       "long_policy=split")
    assert code == 0, err
    assert len(read_conllu(tmp_path / "out.conllu", pos="xpos")[1].pos) == len(LONG)


# --- the command: bad input -------------------------------------------------------------------
def test_cli_bad_input_exits_2_naming_the_spot(run_dir, tmp_path, capsys):
    good = tmp_path / "good.txt"
    good.write_text("A sentence .\n", encoding="utf-8")
    (tmp_path / "latin1.txt").write_bytes(b"fine\ncaf\xe9\n")
    (tmp_path / "empty.txt").write_text("\n\n", encoding="utf-8")
    (tmp_path / "bad.jsonl").write_text('{"words": ["a"]}\n{"words": ["a"\n', encoding="utf-8")
    (tmp_path / "nowords.jsonl").write_text('{"tokens": ["a"]}\n', encoding="utf-8")
    (tmp_path / "noform.conllu").write_text("# c\n1\t_\t_\t_\t_\t_\t_\t_\t_\t_\n2\t_\t_\t_\t_\t_\t_\t_\t_\t_\n",
                                            encoding="utf-8")
    (tmp_path / "four.conllu").write_text("1\tThe\tthe\tDET\n2\tcat\tcat\tNOUN\n", encoding="utf-8")
    pos_only = tmp_path / "pos-run"
    shutil.copytree(run_dir, pos_only, ignore=shutil.ignore_patterns("checkpoint*"))
    saved = OmegaConf.load(pos_only / "config.yaml")
    saved.tasks = ["pos"]
    OmegaConf.save(saved, pos_only / "config.yaml")
    out = f"out={tmp_path / 'o.conll'}"
    cases = [
        ([run_dir, f"input={tmp_path / 'latin1.txt'}", out], f"{tmp_path / 'latin1.txt'}:2: invalid UTF-8"),
        ([run_dir, f"input={tmp_path / 'empty.txt'}", out], f"{tmp_path / 'empty.txt'}:1: no sentence"),
        ([run_dir, f"input={tmp_path / 'missing.txt'}", out], f"{tmp_path / 'missing.txt'}:1: no such file"),
        ([run_dir, f"input={tmp_path / 'bad.jsonl'}", out], f"{tmp_path / 'bad.jsonl'}:2: not valid JSON"),
        ([run_dir, f"input={tmp_path / 'nowords.jsonl'}", out], f"{tmp_path / 'nowords.jsonl'}:1: no key 'words'"),
        ([run_dir, f"input={tmp_path / 'noform.conllu'}", out], f"{tmp_path / 'noform.conllu'}:2: sentence has no words"),
        ([run_dir, f"input={tmp_path / 'four.conllu'}", out],
         f"{tmp_path / 'four.conllu'}:1: line has 4 tab-separated columns; expected 10"),
        ([pos_only, f"input={good}", out, "tasks=pos,dep"], "config key 'tasks'"),
        ([run_dir, f"input={good}", out, "tasks=pos,chunk"], "config key 'tasks'"),
        ([run_dir, f"input={good}", f"out={tmp_path / 'no' / 'such' / 'o.conll'}"], "config key 'out'"),
        ([run_dir, f"input={good}", f"out={tmp_path / 'o.txt'}"], "config key 'format'"),
        ([run_dir, f"input={good}", out, "format=xml"], "config key 'format'"),
        ([run_dir, f"input={good}", f"out={tmp_path / 'o.ptb'}", "tasks=pos"], "config key 'format'"),
        ([tmp_path / "no-run", f"input={good}", out], "config key 'run'"),
        ([run_dir, f"input={good}"], "config key 'out'"),
        ([run_dir, f"input={good}", out, "batch_size=0"], "config key 'batch_size'"),
    ]
    for args, message in cases:
        code, _, err = cli(capsys, *args)
        assert code == 2 and message in err and "Traceback" not in err, (args, err)
    assert not (tmp_path / "o.conll").exists()
    # the pos-only copy is a good run for pos
    code, _, err = cli(capsys, pos_only, f"input={good}", out)
    assert code == 0, err
    assert read_conll2012(tmp_path / "o.conll")[0].pos and "no place" not in err


# --- a removal folder -------------------------------------------------------------------------
def test_removal_folder_predicts(run_dir, expected, tmp_path, capsys):
    from mtl_heads.commands.remove import main as remove_main

    folder = tmp_path / "removal"
    assert remove_main([str(run_dir), f"out={folder}"]) == 0
    capsys.readouterr()
    removed = Predictor.load(folder, device="cpu")
    assert type(removed.model.encoder).__name__ == "HeadsRemovedEncoder" and removed.tasks == TASKS
    got = removed.predict(SENTENCES)
    assert [s.pos for s in got] == [s.pos for s in expected]
    assert all(s.has(layer) for s in got for layer in ("pos", "entities", "deps", "tree", "srl"))
    source = write_inputs(tmp_path)["text"]
    code, printed, err = cli(capsys, folder, f"input={source}", f"out={tmp_path / 'out.jsonl'}")
    assert code == 0, err
    assert f"{len(SENTENCES)} sentences" in printed
    assert [s.words for s in read_jsonl(tmp_path / "out.jsonl")] == SENTENCES


def test_bf16_precision_runs(run_dir):
    s = Predictor.load(run_dir, device="cpu", precision="bf16").predict("The cat sat .")
    assert s.has("pos") and s.has("tree") and s.has("srl")


def test_bench_runs_on_a_given_run(run_dir, tmp_path, capsys):
    import importlib.util

    from helpers import REPO

    spec = importlib.util.spec_from_file_location("predict_speed", REPO / "bench" / "predict_speed.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    data = write_inputs(tmp_path)["conll2012"]
    result = bench.main(["--run", str(run_dir), "--data", str(data), "--repeats", "1", "--device", "cpu",
                         "--batch-size", "4"])
    printed = capsys.readouterr().out
    assert f"{len(SENTENCES)} sentences" in printed and printed.strip().splitlines()[-1].startswith(
        "ratio predict/encoder = ")
    assert result["ratio"] > 0 and set(result["parts"]) == {"encoder"} | {f"{t} {step}" for t in TASKS
                                                                         for step in ("forward", "decode")}
    forwards = sum(v for k, v in result["parts"].items() if k.endswith("forward"))
    assert result["floor"] == pytest.approx(1 + forwards / result["parts"]["encoder"])
    assert "floor of the ratio with this model: " in printed
