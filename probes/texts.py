"""The plain-words texts of probe choices and caveats, shared by the probes and their reports.

Torch-free on purpose: ``mtl_heads.reports.probe_report`` reads these without importing a probe.
"""
__all__ = ["NO_START_TOKEN", "CAUSAL_NOTE", "ROOT_TEXT", "RELATION_TEXT"]

NO_START_TOKEN = "the first word's first sub-word"
""":func:`probes.base.first_token_name` of a causal model whose tokenizer puts no BOS first."""

CAUSAL_NOTE = ("This model is causal (decoder-only): each token attends only to itself and to earlier tokens, "
               "never to a later one. Some gold links can therefore not be found by any head; where that "
               "matters, 'reachable' gives their share beside the score (no head can score more).")
"""The report-level caveat of a causal model (``report.md`` and the printed summary)."""

ROOT_TEXT = {"cls": "[CLS] is the root slot, root arcs scored (He & Choi)",
             "none": "no root slot, word-to-word arcs only, argmax over the words (Clark et al.)"}
RELATION_TEXT = {"full": "labels as in the data, e.g. nsubj:pass", "universal": "UD subtypes dropped, nsubj:pass -> nsubj"}
