"""CoNLL column encodings <-> structures: parse bits <-> nltk.Tree, bracket columns <-> spans.

Parse bits (CoNLL-2012 column 6) hold one tree fragment per word: some ``(LABEL`` opens, one
``*`` standing for the word's preterminal, some ``)`` closes, e.g. ``(TOP(S(NP*`` / ``*))``.
Bracket columns (named entities, one SRL column per predicate) hold non-nested spans:
``(PERSON*`` ... ``*)``, ``(V*)``, ``(ORG)``, ``*``.
"""

import re

import nltk

from mtl_heads.data.errors import data_error
from mtl_heads.data.sentence import Span

_PARSE_BIT = re.compile(r"((?:\([^()*\s]+)*)\*(\)*)")
_OPEN_LABEL = re.compile(r"\(([^()*\s]+)")
_BRACKET_CELL = re.compile(r"(?:\(([^()*\s]+))?(\*?)(\)?)")

MAX_TREE_DEPTH = 200
"""The deepest nesting of constituents a reader accepts. Real trees stay far below (EWT: 40 levels);
code that walks trees recursively (nltk's, the head rules, pickle) overflows Python's stack a few
hundred levels down, so a deeper tree is refused where it is read, with its line."""


# ---------------------------------------------------------------- parse bits <-> tree


def parse_bits_to_tree(words: list[str], pos: list[str], bits: list[str], where: list[str]) -> nltk.Tree:
    """Build the constituency tree of one sentence from its parse bits.

    Args:
        words: the sentence's words (the tree's leaves).
        pos: one POS tag per word (the preterminal labels).
        bits: one parse bit per word, e.g. ``(TOP(S(NP*``, ``*)``.
        where: ``where[i]`` is "path:line" of word i, used in error messages.

    Returns:
        the tree; raises DataError on a malformed bit or unbalanced brackets.
    """
    stack: list[tuple[str, list, str]] = []  # (label, children, where it opened)
    roots: list[tuple[nltk.Tree, str]] = []  # (finished tree, where it closed)
    for i, bit in enumerate(bits):
        match = _PARSE_BIT.fullmatch(bit)
        if match is None:
            raise data_error(where[i], f"malformed parse bit {bit!r}; expected '(LABEL' opens, "
                                       "one '*', then ')' closes, e.g. '(S(NP*' or '*))'")
        for label in _OPEN_LABEL.findall(match.group(1)):
            if roots:
                raise data_error(where[i], f"parse bit {bit!r} starts a second tree after the first "
                                           f"one closed at {roots[0][1]}; expected one tree per sentence")
            stack.append((label, [], where[i]))
            if len(stack) > MAX_TREE_DEPTH:
                raise data_error(where[i], f"parse bit {_short(bit)} nests constituents more than {MAX_TREE_DEPTH} "
                                           f"deep; expected a tree at most {MAX_TREE_DEPTH} levels deep")
        if not stack:
            raise data_error(where[i], f"word {words[i]!r} lies outside the parse tree (parse bit {bit!r}); "
                                       "expected every word inside the tree (leaves == words)")
        stack[-1][1].append(nltk.Tree(pos[i], [words[i]]))
        for _ in match.group(2):
            _close(stack, roots, bit, where[i])
    if stack:
        label, _, opened = stack[-1]
        raise data_error(opened, f"unbalanced parse brackets: '({label}' opened here is never closed "
                                 f"(sentence ends at {where[-1]}); expected a matching ')'")
    return roots[0][0]


def too_deep(text: str) -> bool:
    """True when a bracketed tree string nests ``(`` more than :data:`MAX_TREE_DEPTH` deep."""
    if text.count("(") <= MAX_TREE_DEPTH:  # fast path: it cannot nest deeper than it has brackets
        return False
    depth = 0
    for bracket in re.findall(r"[()]", text):
        depth += 1 if bracket == "(" else -1
        if depth > MAX_TREE_DEPTH:
            return True
    return False


def _short(text: str) -> str:
    """``text`` quoted for a message, cut short when long."""
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _close(stack: list, roots: list, bit: str, where: str) -> None:
    """Close the innermost open constituent of ``stack`` (a ')' of ``bit`` at ``where``)."""
    if not stack:
        raise data_error(where, f"unbalanced parse brackets: a ')' in {bit!r} closes no open constituent")
    label, children, _ = stack.pop()
    tree = nltk.Tree(label, children)
    if stack:
        stack[-1][1].append(tree)
    else:
        roots.append((tree, where))


def tree_to_parse_bits(tree: nltk.Tree) -> list[str]:
    """The parse bits of ``tree`` (one per leaf); the inverse of :func:`parse_bits_to_tree`.

    Args:
        tree: a tree whose leaves each sit under their own preterminal (POS) node, and whose
            root is not itself a preterminal.
    """
    if _is_preterminal(tree):
        raise ValueError(f"tree {tree} is a single preterminal; expected a phrase above the words")
    bits: list[str] = []
    _collect_bits(tree, bits)
    return bits


def _collect_bits(tree: nltk.Tree, bits: list[str]) -> None:
    """Append the bits of ``tree``'s leaves to ``bits``, opening/closing ``tree`` around them."""
    if _is_preterminal(tree):
        bits.append("*")
        return
    first = len(bits)
    for child in tree:
        if not isinstance(child, nltk.Tree):
            raise ValueError(f"word {child!r} has no preterminal in {tree}; expected (POS word)")
        _collect_bits(child, bits)
    bits[first] = f"({tree.label()}" + bits[first]  # outer labels end up first
    bits[-1] = bits[-1] + ")"


def _is_preterminal(tree: nltk.Tree) -> bool:
    """True for a (POS word) node."""
    return len(tree) == 1 and isinstance(tree[0], str)


# ---------------------------------------------------------------- bracket columns <-> spans


def brackets_to_spans(column: list[str], where: list[str], name: str = "bracket column") -> list[Span]:
    """Read the spans of one bracket column (NE or one SRL predicate).

    Args:
        column: one cell per word: ``*``, ``(LABEL*``, ``*)``, ``(LABEL*)`` or ``(LABEL)``.
        where: ``where[i]`` is "path:line" of word i, used in error messages.
        name: what the column is, for error messages (e.g. "NE column").

    Returns:
        (start, end_exclusive, label) spans sorted by start; raises DataError on malformed
        cells, nested spans or unbalanced brackets.
    """
    spans: list[Span] = []
    open_label, open_at = None, -1
    for i, cell in enumerate(column):
        label, closes = _bracket_cell(cell, where[i], name)
        if label is not None:
            if open_label is not None:
                raise data_error(where[i], f"{name}: '({label}' opens inside '({open_label}' opened at "
                                           f"{where[open_at]}; expected non-nested spans in this column")
            open_label, open_at = label, i
        if closes:
            if open_label is None:
                raise data_error(where[i], f"{name}: unbalanced brackets: {cell!r} closes a span that was "
                                           "never opened; expected '(LABEL*' before it")
            spans.append((open_at, i + 1, open_label))
            open_label = None
    if open_label is not None:
        raise data_error(where[open_at], f"{name}: unbalanced brackets: '({open_label}' opened here is never closed "
                                         f"(sentence ends at {where[-1]}); expected a '*)'")
    return spans


def _bracket_cell(cell: str, where: str, name: str) -> tuple[str | None, bool]:
    """Split one bracket cell into (label it opens or None, whether it closes)."""
    match = _BRACKET_CELL.fullmatch(cell)
    ok = match is not None and (match.group(2) == "*" or (match.group(1) and match.group(3)))
    if not ok:
        raise data_error(where, f"{name}: malformed bracket cell {cell!r}; expected '*', '(LABEL*', '*)', "
                                "'(LABEL*)' or '(LABEL)'")
    return match.group(1), match.group(3) == ")"


def spans_to_brackets(spans: list[Span], n: int) -> list[str]:
    """The bracket column (``n`` cells) of non-overlapping ``spans``; inverse of
    :func:`brackets_to_spans`."""
    cells = ["*"] * n
    end_of_last = 0
    for start, end, label in sorted(spans):
        if start < end_of_last or not 0 <= start < end <= n:
            raise ValueError(f"span {(start, end, label)} overlaps another or lies outside 0..{n}")
        if end - start == 1:
            cells[start] = f"({label}*)"
        else:
            cells[start] = f"({label}*"
            cells[end - 1] = "*)"
        end_of_last = end
    return cells


def bio_to_spans(tags: list[str]) -> list[Span]:
    """Spans of a BIO tag sequence (``B-X``, ``I-X``, ``O``), sorted by start.

    An ``I-X`` that does not continue an ``X`` span starts a new one (lenient, as conlleval).
    """
    spans: list[Span] = []
    label, start = None, 0
    for i, tag in enumerate(list(tags) + ["O"]):
        prefix, _, name = tag.partition("-")
        continues = prefix == "I" and name == label
        if label is not None and not continues:
            spans.append((start, i, label))
            label = None
        if prefix in ("B", "I") and not continues:
            label, start = name, i
    return spans


# ---------------------------------------------------------------- PTB bracket lines

PTB_ESCAPES = {"(": "-LRB-", ")": "-RRB-"}
"""Brackets inside words and labels are written as PTB writes them, so each line parses back."""


def ptb_line(tree: nltk.Tree) -> str:
    """``tree`` on one line, ``(TOP (S (NP (PRP She)) ...))``, with ``(`` and ``)`` inside leaves and
    labels written ``-LRB-`` and ``-RRB-``."""
    def escape(text: str) -> str:
        for bracket, name in PTB_ESCAPES.items():
            text = text.replace(bracket, name)
        return text

    def walk(node) -> str:
        if not isinstance(node, nltk.Tree):
            return escape(str(node))
        return f"({escape(str(node.label()))} " + " ".join(walk(child) for child in node) + ")"

    return walk(tree)
