"""Constituency -> dependency conversion with head rules (pure Python, no Java).

Heads are found with the Collins (1999) head table as modified by Stanford's
``ModCollinsHeadFinder`` (:data:`HEAD_RULES`), with three "semantic head" changes in the spirit of
Stanford's ``SemanticHeadFinder`` (de Marneffe et al., LREC 2006):

* in a VP whose head would be an auxiliary (a form of *be*/*have*/*do*/*get*, a modal, or *to*)
  followed by a VP, the VP is the head (the main verb heads its auxiliaries: ``aux``/``auxpass``);
* copula: a form of *be* followed by an NP or ADJP predicate (and no VP) is a ``cop`` dependent of
  that predicate, which heads the clause (as Stanford basic dependencies and UD do);
* SBAR is headed by its clause (complementizers become ``mark``), NP/NML are never headed by a
  possessive ``POS`` (``John 's`` is headed by *John*), and in a coordinated phrase
  (``X , X CC X``) the first conjunct is the head (``conj``, ``cc``).

Punctuation is never chosen as a head unless a phrase holds nothing else. A label missing from
the table falls back to the first non-punctuation child.

Relations follow Stanford basic dependencies (de Marneffe & Manning 2008, *Stanford typed
dependencies manual*) with a compact rule set over (parent label, head child, dependent child,
dependent's head POS): nsubj, nsubjpass, csubj, dobj, iobj, det, amod, advmod, aux, auxpass, cop,
prep, pobj, pcomp, poss, possessive, cc, conj, punct, nn, num, mark, ccomp, xcomp, advcl, rcmod,
vmod, neg, prt, appos, expl, acomp, npadvmod, discourse, parataxis, root, and ``dep`` as the
fallback.
"""
from __future__ import annotations

from dataclasses import dataclass

import nltk

from mtl_heads.data.errors import data_error

PUNCT_TAGS = frozenset({"``", "''", ",", ".", ":", "-LRB-", "-RRB-", "NFP", "HYPH"})
"""PTB punctuation tags (the CoNLL/Stanford evaluation set plus brackets, NFP and HYPH)."""

# label -> list of (direction, categories). "left": for each category in turn, scan the children
# left to right; "leftdis": scan the children left to right for any of the categories; "right" and
# "rightdis" scan right to left. When nothing matches, the first (left*) or last (right*)
# child of the last rule's direction is the head. Source: CoreNLP ModCollinsHeadFinder.
HEAD_RULES: dict[str, list[tuple[str, list[str]]]] = {
    "ADJP": [("left", ["$"]), ("rightdis", ["NNS", "NN", "JJ", "QP", "VBN", "VBG"]), ("left", ["ADJP"]),
             ("rightdis", ["JJP", "JJR", "JJS", "DT", "RB", "RBR", "CD", "IN", "VBD"]), ("left", ["ADVP", "NP"])],
    "JJP": [("left", ["NNS", "NN", "$", "QP", "JJ", "VBN", "VBG", "ADJP", "JJP", "JJR", "NP", "JJS", "DT", "FW",
                      "RBR", "RBS", "SBAR", "RB"])],
    "ADVP": [("left", ["ADVP", "IN"]), ("rightdis", ["RB", "RBR", "RBS", "JJ", "JJR", "JJS"]),
             ("rightdis", ["RP", "DT", "NN", "CD", "NP", "VBN", "NNP", "CC", "FW", "NNS", "ADJP", "NML"])],
    "CONJP": [("right", ["CC", "RB", "IN"])],
    "FRAG": [("right", [])],
    "INTJ": [("left", [])],
    "LST": [("right", ["LS", ":"])],
    "NAC": [("left", ["NN", "NNS", "NML", "NNP", "NNPS", "NP", "NAC", "EX", "$", "CD", "QP", "PRP", "VBG", "JJ",
                      "JJS", "JJR", "ADJP", "JJP", "FW"])],
    "NX": [("right", ["NP", "NX"])],
    "PP": [("right", ["IN", "TO", "VBG", "VBN", "RP", "FW", "JJ", "SYM"]), ("left", ["PP"])],
    "PRN": [("left", ["VP", "NP", "PP", "SQ", "S", "SINV", "SBAR", "ADJP", "JJP", "ADVP", "INTJ", "WHNP", "NAC",
                      "VBP", "JJ", "NN", "NNP"])],
    "PRT": [("right", ["RP"])],
    "QP": [("left", ["$", "IN", "NNS", "NN", "JJ", "CD", "PDT", "DT", "RB", "NCD", "QP", "JJR", "JJS"])],
    "RRC": [("left", ["RRC"]), ("right", ["VP", "ADJP", "JJP", "NP", "PP", "ADVP"])],
    "S": [("left", ["TO", "VP", "S", "FRAG", "SBAR", "ADJP", "JJP", "UCP", "NP", "P"])],
    # semantic: the clause heads SBAR (Collins: the complementizer)
    "SBAR": [("left", ["S", "SQ", "SINV", "SBAR", "FRAG", "VP", "WHNP", "WHPP", "WHADVP", "WHADJP", "IN", "DT"])],
    "SBARQ": [("left", ["SQ", "S", "SINV", "SBARQ", "FRAG", "SBAR"])],
    "SINV": [("left", ["VBZ", "VBD", "VBP", "VB", "MD", "VBN", "VP", "S", "SINV", "ADJP", "JJP", "NP"])],
    "SQ": [("left", ["VBZ", "VBD", "VBP", "VB", "MD", "AUX", "AUXG", "VP", "SQ"])],
    "UCP": [("right", [])],
    "VP": [("left", ["TO", "VBD", "VBN", "MD", "VBZ", "VB", "VBG", "VBP", "VP", "ADJP", "JJP", "NN", "NNS", "JJ",
                     "NP", "NNP"])],
    "WHADJP": [("left", ["WRB", "WHADVP", "RB", "JJ", "ADJP", "JJP", "JJR"])],
    "WHADVP": [("right", ["WRB", "WHADVP"])],
    "WHNP": [("left", ["WDT", "WP", "WP$", "WHADJP", "WHPP", "WHNP"])],
    "WHPP": [("right", ["IN", "TO", "FW"])],
    "X": [("right", ["S", "VP", "ADJP", "JJP", "NP", "SBAR", "PP", "X"])],
    # semantic: no POS in the first rule (the possessor noun heads "John 's")
    "NP": [("rightdis", ["NN", "NNP", "NNPS", "NNS", "NML", "NX", "JJR"]), ("left", ["NP", "PRP"]),
           ("rightdis", ["$", "ADJP", "JJP", "PRN", "FW"]), ("right", ["CD"]),
           ("rightdis", ["JJ", "JJS", "RB", "QP", "DT", "WDT", "RBR", "ADVP", "POS"])],
    "POSSP": [("right", ["POS"])],
    "EDITED": [("left", [])],
    "META": [("left", [])],
    "TOP": [("left", ["S", "SQ", "SINV", "SBARQ", "FRAG"])],
    "ROOT": [("left", ["S", "SQ", "SINV", "SBARQ", "FRAG"])],
}
HEAD_RULES["NML"] = HEAD_RULES["NP"]

AUXILIARIES = frozenset("""be being been am is are was were 's 're 'm ai have has had having 've 'd
do does did done doing get got gets getting gotten will would shall should can could may might must
ca wo 'll to""".split())
BE = frozenset("be being been am is are was were 's 're 'm".split())
PASSIVE_AUX = BE | frozenset("get got gets getting gotten".split())
NEGATIONS = frozenset("not n't never".split())
COMPLEMENTIZERS = frozenset("that whether if".split())
NOMINAL = frozenset({"NP", "NML", "NX", "NAC", "NN", "NNS", "NNP", "NNPS", "PRP", "FW", "CD", "QP", "$"})
CLAUSES = frozenset({"S", "SQ", "SINV", "SBARQ"})


class _Node:
    """What the relation rules need of one constituent: label, head word index and its children."""

    __slots__ = ("label", "head", "children", "leaf")

    def __init__(self, label: str, head: int, children: list, leaf: bool):
        self.label, self.head, self.children, self.leaf = label, head, children, leaf


@dataclass(frozen=True)
class _Parse:
    """One sentence under conversion: its words and POS tags (one per leaf, in order), and the dependencies
    found so far, filled in place by :func:`_attach` (the lists are shared, not copied)."""

    words: list[str]
    """The leaves' words."""
    tags: list[str]
    """The leaves' POS tags (empty for a bare word under a phrase)."""
    heads: list[int]
    """Each word's 1-based head (0: none yet, or the root)."""
    rels: list[str]
    """Each word's relation to its head (``dep`` until one is found)."""


def tree_to_dependencies(tree: nltk.Tree) -> tuple[list[int], list[str]]:
    """Dependency heads and relations of the leaves of a constituency tree.

    Args:
        tree: a CoNLL-2012 tree (root ``TOP``, no traces); preterminals are POS tags, leaves are
            words. A bare word directly under a phrase is accepted (as a word with an empty tag).

    Returns:
        ``(heads, rels)``: one 1-based head per word (0 = root; exactly one) and one relation.
    """
    if isinstance(tree, str):
        raise ValueError(f"expected an nltk.Tree, got the string {tree!r}")
    words: list[str] = []
    tags: list[str] = []
    root = _build(tree, words, tags)
    if not words:
        raise ValueError(f"tree {tree} has no words")
    heads, rels = [0] * len(words), ["dep"] * len(words)
    _attach(root, _Parse(words, tags, heads, rels))
    rels[root.head] = "root"
    return heads, rels


def _build(tree, words: list[str], tags: list[str]) -> _Node:
    """Post-order walk: record the leaves and choose each constituent's head child."""
    if isinstance(tree, str):  # a word without a preterminal
        words.append(tree)
        tags.append("")
        return _Node("", len(words) - 1, [], True)
    if len(tree) == 1 and isinstance(tree[0], str):
        words.append(tree[0])
        tags.append(tree.label())
        return _Node(tree.label(), len(words) - 1, [], True)
    children = [_build(child, words, tags) for child in tree]
    if not children:
        raise ValueError(f"constituent {tree.label()!r} has no children; expected a word or phrases below it")
    label = tree.label()
    return _Node(label, children[_head_child(label, children, words)].head, children, False)


def _head_child(label: str, children: list[_Node], words: list[str]) -> int:
    """Index of the head child of a ``label`` phrase."""
    candidates = [i for i, c in enumerate(children) if c.label not in PUNCT_TAGS] or list(range(len(children)))
    conjuncts = _conjuncts(children)
    if conjuncts:
        return conjuncts[0]
    head = _by_table(label, children, candidates)
    if label == "VP":
        head = _semantic_vp_head(children, head, words)
    return head


def _by_table(label: str, children: list[_Node], candidates: list[int]) -> int:
    rules = HEAD_RULES.get(label, [("left", [])])
    for direction, categories in rules:
        order = candidates if direction.startswith("left") else candidates[::-1]
        if direction in ("left", "right"):
            for category in categories:
                for i in order:
                    if children[i].label == category:
                        return i
        else:
            for i in order:
                if children[i].label in categories:
                    return i
    return candidates[0] if rules[-1][0].startswith("left") else candidates[-1]


def _semantic_vp_head(children: list[_Node], head: int, words: list[str]) -> int:
    """The main verb (a VP complement) over an auxiliary; the predicate over a copula."""
    if not children[head].leaf or words[children[head].head].lower() not in AUXILIARIES:
        return head
    after = [i for i in range(head + 1, len(children))]
    for i in after:
        if children[i].label == "VP":
            return i
    if words[children[head].head].lower() in BE:
        for i in after:
            if children[i].label in ("NP", "ADJP"):
                return i
    return head


def _conjuncts(children: list[_Node]) -> list[int]:
    """Indices of the conjuncts of a coordinated phrase ``X (,) X CC X`` (empty when none)."""
    ccs = [i for i, c in enumerate(children) if c.label in ("CC", "CONJP") and 0 < i < len(children) - 1]
    if not ccs:
        return []
    found = set()
    for i in ccs:
        right = _skip_punct(children, i + 1, 1)
        left = _skip_punct(children, i - 1, -1)
        if right is None or left is None or children[left].label in ("CC", "CONJP"):
            continue
        if i == ccs[-1] and _skip_punct(children, right + 1, 1) is not None:
            return []  # "big and red car": the last conjunct is not the phrase's end
        found.update((left, right))
        # ", X" pairs further left: "A , B , and C"
        j = left - 1
        while j >= 1 and children[j].label == "," and children[j - 1].label == children[left].label:
            found.add(j - 1)
            j -= 2
    return sorted(found)


def _skip_punct(children: list[_Node], i: int, step: int) -> int | None:
    while 0 <= i < len(children) and children[i].label in PUNCT_TAGS:
        i += step
    return i if 0 <= i < len(children) else None


# ---------------------------------------------------------------- relations


def _attach(node: _Node, parse: _Parse) -> None:
    """Post-order: attach every non-head child's head word to ``node``'s head word, with its relation (into
    ``parse.heads`` and ``parse.rels``)."""
    for child in node.children:
        _attach(child, parse)
    if node.leaf:
        return
    conjuncts = set(_conjuncts(node.children))
    head_child = next(c for c in node.children if c.head == node.head)
    n_objects = sum(1 for c in node.children if c.label == "NP" and c.head > node.head)
    for i, child in enumerate(node.children):
        if child is head_child:
            continue
        parse.heads[child.head] = node.head + 1
        parse.rels[child.head] = _relation(node, head_child, child, i, i in conjuncts, n_objects, parse)


def _relation(parent, head_child, dep, i, conjunct, n_objects, parse: _Parse) -> str:
    """Stanford-basic-style relation of ``dep`` (``parent.children[i]``) to ``parent``'s head; ``conjunct``: it is
    one of the parent's conjuncts; ``n_objects``: the parent's NP children after its head."""
    words, tags, heads, rels = parse.words, parse.tags, parse.heads, parse.rels
    p, d, h = parent.label, dep.label, head_child.label
    word, tag = words[dep.head].lower(), tags[dep.head]
    left = dep.head < parent.head
    if d in PUNCT_TAGS:
        return "punct"
    if conjunct:
        return "conj"
    if d in ("CC", "CONJP"):
        return "cc"
    if d in ("PRT", "RP"):
        return "prt"
    if d == "POS":
        return "possessive"
    if word in NEGATIONS and (d in ("RB", "ADVP") or tag == "RB"):
        return "neg"
    if d in ("UH", "INTJ"):
        return "discourse"
    if d == "EX":
        return "expl"
    verbal = d in ("MD", "TO") or d.startswith("VB")
    if h in ("VP", "ADJP", "NP") and p in ("VP", "SQ", "SINV") and verbal and word in AUXILIARIES:
        return _auxiliary(parent, word, words, tags, heads, rels)
    if d == "MD" or (d == "TO" and p in ("VP", "S")):
        return "aux"
    if p in ("SBAR",) and (d in ("IN", "DT") or word in COMPLEMENTIZERS) and dep.leaf:
        return "mark"
    if p == "SBAR" and d == "WHNP":
        return "nsubj" if _has_vp_only(head_child) else "dobj"
    if d in ("PP", "WHPP"):
        return "prep"
    if p in ("PP", "WHPP"):
        return _in_pp(d)
    if p in ("NP", "NML", "NX", "NAC", "WHNP", "QP"):
        return _in_noun_phrase(parent, dep, i, d, tag, left)
    if d in ("RB", "RBR", "RBS", "ADVP", "WHADVP", "WRB"):
        return "advmod"
    if d in ("NP", "WHNP") and left and p in CLAUSES | {"SBAR", "SBARQ"}:
        return "nsubjpass" if _passive(parent.head, heads, rels) else "nsubj"
    if d in ("NP", "WHNP") and p in ("SINV", "SQ") and dep is next(c for c in parent.children if c.label == d):
        return "nsubj"
    if d in ("S", "SBAR") and left and p in CLAUSES and h == "VP" and i == 0 and _has_vp_only(parent):
        return "csubj"
    if p == "VP":
        return _in_verb_phrase(parent, dep, d, left, n_objects, words)
    if p in CLAUSES:
        if d == "SBAR":
            return "advcl"
        if d in CLAUSES:
            return "ccomp" if not left and h == "VP" else "parataxis" if d != "S" or not _has_vp_only(dep) else "advcl"
        if d in ("NP",):
            return "npadvmod"
    if p in ("ADJP", "ADVP", "WHADJP", "JJP"):
        if d in ("NP",):
            return "npadvmod"
        if d in ("SBAR", "S"):
            return "ccomp" if d == "SBAR" else "xcomp"
        if d in ("JJ", "ADJP", "JJR", "JJS"):
            return "amod"
    return "dep"


def _auxiliary(parent, word, words, tags, heads, rels) -> str:
    """aux / auxpass / cop of an auxiliary verb ``word`` next to a VP, ADJP or NP head."""
    head_tag = _head_tag(parent, words)
    if parent.children and next(c for c in parent.children if c.head == parent.head).label in ("NP", "ADJP"):
        return "cop" if word in BE else "aux"
    if word in PASSIVE_AUX and head_tag == "VBN":
        return "auxpass"
    return "aux"


def _head_tag(node, words):
    while not node.leaf:
        node = next(c for c in node.children if c.head == node.head)
    return node.label


def _passive(head: int, heads: list[int], rels: list[str]) -> bool:
    return any(h == head + 1 and r == "auxpass" for h, r in zip(heads, rels))


def _has_vp_only(node) -> bool:
    """True for a clause without a subject (``S`` whose non-punct children hold no NP)."""
    return not any(c.label in ("NP", "WHNP") for c in node.children if c.head < node.head) and not node.leaf


def _in_pp(d: str) -> str:
    if d in ("NP", "WHNP", "NML", "NN", "NNS", "NNP", "NNPS", "PRP", "CD", "QP", "WP", "WDT"):
        return "pobj"
    if d in ("S", "SBAR", "VP", "PP", "SQ", "SBARQ", "ADJP", "ADVP", "WHADVP"):
        return "pcomp"
    if d in ("RB", "RBR", "ADVP"):
        return "advmod"
    return "dep"


def _in_noun_phrase(parent, dep, i, d, tag, left) -> str:
    if d in ("DT", "PDT", "WDT") or (d in ("WHNP",) and tag in ("WDT",)):
        return "det"
    if d in ("PRP$", "WP$") or (d in ("NP", "NML", "WHNP") and (tag in ("PRP$", "WP$") or _ends_with_pos(dep))):
        return "poss"
    if d in ("CD", "QP"):
        return "num"
    if d in ("JJ", "JJR", "JJS", "VBN", "VBG", "ADJP", "WHADJP"):
        return "amod"
    if d in ("RB", "RBR", "RBS", "ADVP"):
        return "advmod"
    if d in ("SBAR",):
        return "rcmod"
    if d in ("VP", "S", "RRC"):
        return "vmod"
    if d in NOMINAL:
        if left:
            return "nn"
        before = parent.children[i - 1].label if i > 0 else ""
        return "appos" if before in (",", ":", "-LRB-") or d == "PRN" else "dep"
    if d == "PRN":
        return "appos"
    return "dep"


def _ends_with_pos(node) -> bool:
    return not node.leaf and node.children[-1].label == "POS"


def _in_verb_phrase(parent, dep, d, left, n_objects, words) -> str:
    if d in ("NP",) and not left:
        objects = [c for c in parent.children if c.label == "NP" and c.head > parent.head]
        return "iobj" if n_objects == 2 and dep is objects[0] else "dobj"
    if d == "SBAR":
        first = dep.children[0] if dep.children else dep
        starts = words[first.head].lower() if first.leaf else ""
        if first.label == "IN" and starts not in COMPLEMENTIZERS:
            return "advcl"
        return "ccomp"
    if d in ("S", "SQ", "SINV", "SBARQ"):
        return "xcomp" if _has_vp_only(dep) else "ccomp"
    if d in ("ADJP", "JJ"):
        return "acomp"
    if d in ("NP",):
        return "npadvmod"
    return "dep"


def check_tree(heads: list[int], where: str) -> None:
    """Raise :class:`DataError` (message starting with ``where``) unless ``heads`` is a tree.

    Args:
        heads: 1-based head per word, 0 = root.
        where: "path:line" (or any label) naming the sentence, put first in the message.
    """
    n = len(heads)
    if n == 0:
        raise data_error(where, "sentence has no words; expected at least one dependency")
    for i, head in enumerate(heads):
        if not isinstance(head, int) or not 0 <= head <= n:
            raise data_error(where, f"word {i + 1} has head {head!r}; expected an integer in 0..{n}")
    roots = [i + 1 for i, head in enumerate(heads) if head == 0]
    if len(roots) != 1:
        raise data_error(where, f"{len(roots)} roots (words {roots}); expected exactly one word with head 0")
    for start in range(1, n + 1):
        word = start
        for _ in range(n):
            word = heads[word - 1]
            if word == 0:
                break
        else:
            raise data_error(where, f"dependency heads form a cycle through word {start}; expected a tree")
