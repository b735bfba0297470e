"""The in-memory sentence shared by every reader, task and probe."""

from dataclasses import dataclass, field

import nltk

LAYERS = ("words", "pos", "tree", "entities", "srl", "deps")
"""Annotation layers; "srl" = predicates + arguments, "deps" = heads + rels."""

Span = tuple[int, int, str]
"""(start, end_exclusive, label) over word indices."""


@dataclass
class Sentence:
    """One sentence with whatever layers its corpus annotates (``None`` = not annotated).

    Args:
        words: the tokens.
        pos: one Penn Treebank tag per word.
        tree: constituency tree; leaves == words, preterminal labels == pos.
        entities: named-entity spans (start, end_exclusive, label), sorted; ``[]`` means
            annotated with no entity, ``None`` means not annotated.
        predicates: word index of each predicate, in the order of the SRL columns.
        arguments: per predicate, its spans (start, end_exclusive, role) sorted by start,
            including the ``V`` span; ``C-``/``R-`` roles are kept verbatim.
        heads: dependency head per word, 1-based, 0 = root.
        rels: dependency relation per word.
        source: "path:line" of the sentence's first token line; provenance only, so it is
            left out of ``==`` (a sentence written and read back compares equal).
    """

    words: list[str]
    pos: list[str] | None = None
    tree: nltk.Tree | None = None
    entities: list[Span] | None = None
    predicates: list[int] | None = None
    arguments: list[list[Span]] | None = None
    heads: list[int] | None = None
    rels: list[str] | None = None
    source: str = field(default="", compare=False)

    def has(self, layer: str) -> bool:
        """True when ``layer`` (one of :data:`LAYERS`) is annotated on this sentence."""
        if layer == "srl":
            return self.predicates is not None and self.arguments is not None
        if layer == "deps":
            return self.heads is not None and self.rels is not None
        if layer in LAYERS:
            return getattr(self, layer) is not None
        raise ValueError(f"unknown layer {layer!r}; expected one of {LAYERS}")
