"""Sentences from the Hugging Face ``conll2012_ontonotesv5`` dataset (local cache only).

Layout: one row per document, ``document_id`` and ``sentences``: a list of dicts with ``words``,
``pos_tags`` and ``named_entities`` (ClassLabel ints), ``parse_tree`` (a bracketed string such as
``(TOP(S(NP (PRP I))...``, None/empty when OntoNotes has no parse), and ``srl_frames``: a list of
``{"verb": str, "frames": BIO tags}``, the predicate being the word tagged ``B-V``.
"""

import contextlib
import numbers
import os

import nltk

from mtl_heads.data.errors import DataError, data_error
from mtl_heads.data.sentence import Sentence
from mtl_heads.data.trees import MAX_TREE_DEPTH, bio_to_spans, too_deep

DATASET = "conll2012_ontonotesv5"


def sentences_from_hf(dataset) -> list[Sentence]:
    """Convert ``conll2012_ontonotesv5`` rows to Sentences.

    Args:
        dataset: a ``datasets.Dataset`` with the ``conll2012_ontonotesv5`` features (its
            ``features`` give the POS and NE tag names).

    Returns:
        the sentences, documents in row order; ``source`` is "document_id:k" with k the
        1-based sentence number within the document (also the "line" of error messages).
    """
    pos_names = _label_names(dataset.features, "pos_tags")
    ne_names = _label_names(dataset.features, "named_entities")
    sentences = []
    for row in dataset:
        for k, item in enumerate(row["sentences"], start=1):
            where = f"{row['document_id']}:{k}"
            sentences.append(_sentence(item, pos_names, ne_names, where))
    return sentences


def _label_names(features, field: str) -> list[str] | None:
    """The ClassLabel names of ``sentences[*][field][*]``, or None when the tags are strings.

    The nesting is a python list (``[{...}]``), ``Sequence`` or ``List`` depending on the
    ``datasets`` version, hence :func:`_element`.
    """
    sentence = _element(features["sentences"])
    tags = _element(sentence[field])
    return list(tags.names) if hasattr(tags, "names") else None


def _element(feature):
    """The feature of one element of a list-like feature."""
    if isinstance(feature, (list, tuple)):
        return feature[0]
    if hasattr(feature, "feature"):
        return feature.feature
    return feature


def _names(values: list, names: list[str] | None, field: str, n: int, where: str) -> list[str]:
    """Tag strings of ClassLabel ints (or the values themselves when already strings), one per word.

    Raises DataError at ``where`` when there are not ``n`` tags or an int is no label index
    (ClassLabel writes -1 for "no label", which plain indexing would read as the last name).
    """
    values = list(values)
    if len(values) != n:
        raise data_error(where, f"{field} has {len(values)} tags; expected one per word ({n})")
    if names is None:
        return [str(v) for v in values]
    for i, v in enumerate(values):
        if not isinstance(v, numbers.Integral) or not 0 <= v < len(names):
            raise data_error(where, f"{field}[{i}] is {v!r}; expected a label index in 0..{len(names) - 1}")
    return [names[v] for v in values]


def _sentence(item: dict, pos_names, ne_names, where: str) -> Sentence:
    """One Sentence from one HF sentence dict."""
    words = list(item["words"])
    pos = _names(item["pos_tags"], pos_names, "pos_tags", len(words), where)
    predicates, arguments = _srl(item.get("srl_frames") or [], len(words), where)
    return Sentence(
        words=words,
        pos=pos,
        tree=_tree(item.get("parse_tree"), words, pos, where),
        entities=bio_to_spans(_names(item["named_entities"], ne_names, "named_entities", len(words), where)),
        predicates=predicates,
        arguments=arguments,
        source=where,
    )


def _tree(text: str | None, words: list[str], pos: list[str], where: str) -> nltk.Tree | None:
    """Parse the bracketed tree string; its preterminals are reset to (pos[i] words[i]).

    The HF builder writes ``(`` / ``)`` words as ``-LRB-`` / ``-RRB-`` leaves, so only the
    leaf count is checked and the leaves are then replaced by the sentence's own words and tags.
    """
    if not text or not text.strip():
        return None
    if too_deep(text):
        raise data_error(where, f"parse_tree nests brackets more than {MAX_TREE_DEPTH} deep; expected a tree "
                                f"at most {MAX_TREE_DEPTH} levels deep")
    try:
        tree = nltk.Tree.fromstring(text)
    except ValueError as error:
        raise data_error(where, f"parse_tree is not a well-formed bracketed tree ({error})") from None
    leaves = tree.treepositions("leaves")
    if len(leaves) != len(words):
        raise data_error(where, f"parse_tree has {len(leaves)} leaves; expected the {len(words)} words")
    for i, leaf in enumerate(leaves):
        if len(leaf) < 2 or len(tree[leaf[:-1]]) != 1:
            raise data_error(where, f"word {i} ({words[i]!r}) has no preterminal of its own in parse_tree")
        tree[leaf[:-1]] = nltk.Tree(pos[i], [words[i]])
    return tree


def _srl(frames: list[dict], n: int, where: str) -> tuple[list[int], list[list]]:
    """Predicates (``B-V`` word of each frame) and argument spans, sorted by predicate index."""
    pairs = []
    for frame in frames:
        tags = list(frame["frames"])
        if len(tags) != n:
            raise data_error(where, f"SRL frame of {frame.get('verb')!r} has {len(tags)} tags; expected {n}")
        if "B-V" not in tags:
            raise data_error(where, f"SRL frame of {frame.get('verb')!r} has no 'B-V' tag; expected the "
                                    "predicate's V span")
        pairs.append((tags.index("B-V"), bio_to_spans(tags)))
    pairs.sort(key=lambda pair: pair[0])
    return [p for p, _ in pairs], [spans for _, spans in pairs]


def load_hf_conll2012(config: str = "english_v4", split: str = "train", cache_dir: str | None = None) -> list[Sentence]:
    """Load ``conll2012_ontonotesv5`` from the local Hugging Face cache only (never the network).

    Args:
        config: dataset config, e.g. ``english_v4``, ``english_v12``.
        split: ``train``, ``validation`` or ``test``.
        cache_dir: the ``datasets`` cache folder (None: the default, ``HF_DATASETS_CACHE``).

    Raises DataError saying how to fetch the dataset when it is not cached.
    """
    import datasets  # heavy import, only needed here

    try:
        with _offline(datasets):
            dataset = datasets.load_dataset(DATASET, config, split=split, cache_dir=cache_dir)
    except Exception as error:  # any failure means "not usable from the cache"
        cache = cache_dir or datasets.config.HF_DATASETS_CACHE
        raise DataError(
            f"{cache}:1: {DATASET} (config {config!r}, split {split!r}) is not in the local Hugging Face "
            f"cache ({type(error).__name__}: {error}). Fetch it once on a machine with network access, "
            f"e.g. `python -c \"import datasets; datasets.load_dataset('{DATASET}', '{config}', "
            f"split='{split}', cache_dir=...)\"` (it is a script-based dataset: a datasets version that "
            "still runs dataset scripts may be needed), then copy the cache folder here; or use the "
            "CoNLL-2012 files with read_conll2012."
        ) from None
    return sentences_from_hf(dataset)


@contextlib.contextmanager
def _offline(datasets):
    """Force offline mode for the duration: environment variables and the already-read config."""
    import huggingface_hub.constants as hub_constants

    saved_env = {key: os.environ.get(key) for key in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")}
    saved_flags = (datasets.config.HF_HUB_OFFLINE, datasets.config.HF_DATASETS_OFFLINE, hub_constants.HF_HUB_OFFLINE)
    os.environ.update({key: "1" for key in saved_env})
    datasets.config.HF_HUB_OFFLINE = datasets.config.HF_DATASETS_OFFLINE = hub_constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        datasets.config.HF_HUB_OFFLINE, datasets.config.HF_DATASETS_OFFLINE, hub_constants.HF_HUB_OFFLINE = saved_flags
