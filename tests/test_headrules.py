"""Head-rule conversion: hand-checked trees, validity on generated and EWT trees, check_tree."""
import random

import nltk
import pytest

from mtl_heads.data.errors import DataError
from mtl_heads.data.headrules import HEAD_RULES, check_tree, tree_to_dependencies



def convert(text):
    tree = nltk.Tree.fromstring(text)
    heads, rels = tree_to_dependencies(tree)
    return list(zip(tree.leaves(), heads, rels))


def test_simple_clause():
    assert convert("(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .)))") == [
        ("The", 2, "det"), ("cat", 3, "nsubj"), ("sat", 0, "root"), ("on", 3, "prep"), ("the", 6, "det"),
        ("mat", 4, "pobj"), (".", 3, "punct")]


def test_auxiliaries_copula_and_passive():
    assert convert("(TOP (S (NP (PRP He)) (VP (MD will) (VP (VB be) (ADJP (JJ happy)))) (. .)))") == [
        ("He", 4, "nsubj"), ("will", 4, "aux"), ("be", 4, "cop"), ("happy", 0, "root"), (".", 4, "punct")]
    assert convert("(TOP (S (NP (NP (NNP John) (POS 's)) (NN dog)) (VP (VBD was) (VP (VBN bitten)))))") == [
        ("John", 3, "poss"), ("'s", 1, "possessive"), ("dog", 5, "nsubjpass"), ("was", 5, "auxpass"),
        ("bitten", 0, "root")]
    assert convert("(TOP (S (NP (PRP I)) (VP (VBP do) (RB n't) (VP (VB want) (S (VP (TO to) (VP (VB go))))))))") == [
        ("I", 4, "nsubj"), ("do", 4, "aux"), ("n't", 4, "neg"), ("want", 0, "root"), ("to", 6, "aux"),
        ("go", 4, "xcomp")]


def test_coordination_objects_and_compounds():
    assert convert("(TOP (S (NP (DT the) (NNS cats) (CC and) (NNS dogs)) (VP (VBD gave) (NP (PRP me)) "
                   "(NP (DT a) (NN book) (NN store)))))") == [
        ("the", 2, "det"), ("cats", 5, "nsubj"), ("and", 2, "cc"), ("dogs", 2, "conj"), ("gave", 0, "root"),
        ("me", 5, "iobj"), ("a", 9, "det"), ("book", 9, "nn"), ("store", 5, "dobj")]
    # "big and red car": not a coordinated NP, the noun stays the head
    assert [h for _, h, _ in convert("(TOP (NP (DT a) (JJ big) (CC and) (JJ red) (NN car)))")] == [5, 5, 5, 5, 0]


def test_clauses():
    assert convert("(TOP (S (NP (PRP I)) (VP (VBP think) (SBAR (IN that) (S (NP (PRP he)) (VP (VBD left)))))))") == [
        ("I", 2, "nsubj"), ("think", 0, "root"), ("that", 5, "mark"), ("he", 5, "nsubj"), ("left", 2, "ccomp")]
    assert convert("(TOP (NP (NP (DT the) (NN man)) (SBAR (WHNP (WP who)) (S (VP (VBD left))))))") == [
        ("the", 2, "det"), ("man", 0, "root"), ("who", 4, "nsubj"), ("left", 2, "rcmod")]


def test_single_word_and_unknown_labels():
    assert tree_to_dependencies(nltk.Tree.fromstring("(TOP (NN word))")) == ([0], ["root"])
    heads, rels = tree_to_dependencies(nltk.Tree.fromstring("(TOP (ZZZ (QQ a) (QQ b) (, ,)))"))
    assert heads == [0, 1, 1] and rels == ["root", "dep", "punct"]  # unknown label: first non-punct child
    heads, _ = tree_to_dependencies(nltk.Tree.fromstring("(TOP (. !) (. ?))"))  # punctuation only
    check_tree(heads, "x")


def random_tree(rng, labels, tags, depth=0):
    if depth > 4 or rng.random() < 0.3:
        return nltk.Tree(rng.choice(tags), [rng.choice(["a", "the", "is", "to", "and", "not", ","])])
    return nltk.Tree(rng.choice(labels), [random_tree(rng, labels, tags, depth + 1) for _ in range(rng.randint(1, 4))])


def test_generated_trees_are_valid():
    rng = random.Random(0)
    labels = sorted(HEAD_RULES) + ["UNKNOWN"]
    tags = ["NN", "DT", "VBZ", "TO", "CC", ",", ".", "IN", "JJ", "POS", "MD", "RB", "PRP$", "CD", "-LRB-", "XX"]
    for _ in range(2000):
        tree = nltk.Tree("TOP", [random_tree(rng, labels, tags)])
        heads, rels = tree_to_dependencies(tree)
        assert len(heads) == len(rels) == len(tree.leaves())
        check_tree(heads, "generated")
        assert rels.count("root") == 1 and rels[heads.index(0)] == "root"


def test_check_tree_errors():
    check_tree([2, 0, 2], "s:1")
    with pytest.raises(DataError, match=r"^s:1: 2 roots"):
        check_tree([0, 0], "s:1")
    with pytest.raises(DataError, match=r"^s:2: .*cycle"):
        check_tree([2, 3, 2, 0], "s:2")
    with pytest.raises(DataError, match=r"^s:3: word 1 has head 5"):
        check_tree([5, 0], "s:3")
    with pytest.raises(DataError, match=r"^s:4: sentence has no words"):
        check_tree([], "s:4")
    with pytest.raises(ValueError, match="no children"):
        tree_to_dependencies(nltk.Tree("TOP", [nltk.Tree("NP", [])]))


@pytest.mark.integration
def test_ewt_dev_all_trees_valid_and_close_to_ud(ewt):
    gold_conll, conllu = ewt / "en_ewt.dev.gold_conll", ewt / "en_ewt.dev.conllu"
    if not gold_conll.exists() or not conllu.exists():
        pytest.skip(f"{ewt} not found")
    from mtl_heads.data.conll2012 import read_conll2012
    from mtl_heads.data.conllu import read_conllu
    sentences, ud = read_conll2012(gold_conll), read_conllu(conllu)
    agree = total = 0
    for sentence, other in zip(sentences, ud):
        heads, rels = tree_to_dependencies(sentence.tree)
        check_tree(heads, sentence.source)
        assert len(heads) == len(sentence.words)
        agree += sum(a == b for a, b in zip(heads, other.heads))
        total += len(heads)
    print(f"\nhead-rule vs UD unlabelled agreement on EWT dev: {100 * agree / total:.1f}% of {total} words")
    assert agree / total > 0.40
