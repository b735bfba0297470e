"""Which files feed a run: the ``data`` section of the config -> sentences per role.

Roles are ``train``, ``dev`` and ``test``; ``data.splits`` says which corpus split plays each role
(for EWT NER, ``data.splits.train=dev``).

Formats (``data.format``): ``demo``, ``conll2012`` (OntoNotes), ``ewt`` (CoNLL-2012 + aligned
CoNLL-U), ``hf`` and ``conllu`` (any Universal Dependencies treebank: ``data.path`` = a UD folder
holding ``*-ud-{train,dev,test}.conllu``, or ``data.train/dev/test`` = one file per split).
``data.pos`` picks the POS column (``upos``/``xpos``; ``auto`` = UPOS for CoNLL-U, the PTB tags
elsewhere) and ``data.deprel`` the relations (``full`` or ``universal``, without subtypes).
"""
from __future__ import annotations

import os
from pathlib import Path

from mtl_heads.config import EWT_BUILD, EWT_FOLDERS, UD_FORMATS, ConfigError, find_path, pos_column, sentence_range
from mtl_heads.data.conll2012 import read_conll2012
from mtl_heads.data.conllu import attach_conllu, read_conllu
from mtl_heads.data.demo import ensure_demo_corpus
from mtl_heads.data.headrules import tree_to_dependencies
from mtl_heads.data.sentence import Sentence
from mtl_heads.folders import shown

ROLES = ("train", "dev", "test")
# where dependencies come from: auto = UD from an aligned CoNLL-U file when the corpus has one
# (EWT), else converted from the constituency trees by head rules
DEPS = ("auto", "ud", "converted", "none")
DEPRELS = ("full", "universal")  # data.deprel: UD relations as written, or without ":subtype"
LAYER_FIELDS = {"pos": ("pos",), "tree": ("tree",), "entities": ("entities",),
                "srl": ("predicates", "arguments"), "deps": ("heads", "rels")}


# the excerpts of the EWT corpus's three sources that the tests use (in a clone; mtl_heads.data.ewt_sources)
EXCERPTS = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "ewt-sources"


def small_corpus_command() -> str:
    """The command that builds a small real corpus offline, from the excerpts of the three sources that the
    tests use (:data:`EXCERPTS`, named relative to the working folder when below it; ``check=false``: they
    are excerpts, not the pinned repositories)."""
    return f"python -m mtl_heads ewt sources={shown(EXCERPTS)} check=false"


def cache_dir() -> Path:
    """Where generated files go (``$MTL_HEADS_CACHE``, default ``~/.cache/mtl_heads``)."""
    return Path(os.environ.get("MTL_HEADS_CACHE", Path.home() / ".cache" / "mtl_heads"))


def resolve_path(value: str, key: str) -> Path:
    """A path from the config: as given (relative to the working folder), else relative to the
    project folder; a missing path is an error naming the key."""
    found = find_path(value)
    if found is None:
        raise ConfigError(f"config key '{key}': path {value!r} does not exist")
    return found


def load_corpus(data, layers: set[str] | None = None, roles: tuple[str, ...] = ROLES,
                cuts: dict | None = None) -> dict[str, list[Sentence]]:
    """Sentences for each role, read per ``data.format`` (demo | conll2012 | ewt | hf | conllu).

    A role keeps the slice that ``data.sentences`` names for it, else the first N sentences of its
    split: ``data.max_sentences`` for train, ``data.max_eval_sentences`` for dev and test (see
    :func:`max_sentences`), else all of them.

    Args:
        data: the config's ``data`` section.
        layers: the layers the run's tasks need (default: all); dependencies are converted from
            trees only when ``deps`` is among them.
        roles: the roles to read (default: train, dev and test).
        cuts: a dict to fill (default: none) with ``{role: {"kept", "of", "start", "by"}}`` for each
            role that keeps fewer sentences than its split holds: ``kept`` sentences from index
            ``start`` of ``of``, by the config key ``by``. Scores on a cut dev or test split are not
            comparable with scores on the whole split (:func:`cut_note` words a cut).
    """
    readers = {"demo": _demo, "conll2012": _conll2012, "ewt": _ewt, "hf": _hf, "conllu": _conllu}
    if data.format not in readers:
        raise ConfigError(f"config key 'data.format': expected one of {', '.join(readers)}, got {data.format!r}")
    if data.deps not in DEPS:
        raise ConfigError(f"config key 'data.deps': expected one of {', '.join(DEPS)}, got {data.deps!r}")
    if data.deps == "ud" and data.format not in UD_FORMATS:
        raise ConfigError(f"config key 'data.deps': ud needs CoNLL-U files (data.format=conllu or ewt), "
                          f"not data.format={data.format}; use converted")
    if data.deps == "converted" and data.format == "conllu":
        raise ConfigError("config key 'data.deps': converted needs constituency trees, which CoNLL-U files do not "
                          "hold; use auto (the file's own trees) or none")
    pos_column(data)
    deprel(data)
    convert = layers is None or "deps" in layers
    splits = dict(data.splits)
    corpus = {}
    for role in roles:
        split = splits.get(role, role)
        sentences = readers[data.format](data, role, split)
        if convert and (data.deps == "converted" or (data.deps == "auto" and not any(s.has("deps") for s in sentences))):
            convert_trees(sentences)
        _drop_layers(sentences, (data.unannotated or {}).get(split, []), split)
        kept = (data.get("sentences") or {}).get(role)
        limit = max_sentences(data, role)
        whole = len(sentences)
        if kept is not None:  # checked by the config: N or [start, end)
            start, by = sentence_range(kept)[0], f"data.sentences.{role}"
            sentences = sentences[slice(*sentence_range(kept))]
        elif limit:
            start, by = 0, f"data.{'max_sentences' if role == 'train' else 'max_eval_sentences'}={limit}"
            sentences = sentences[:limit]
        if cuts is not None and len(sentences) < whole:
            cuts[role] = {"kept": len(sentences), "of": whole, "start": start, "by": by}
        corpus[role] = sentences
    return corpus


def max_sentences(data, role: str) -> int | None:
    """The cap on ``role``'s sentences (the first N are kept): ``data.max_sentences`` for train,
    ``data.max_eval_sentences`` for dev and test (absent from configs saved before it: none). None: all.
    A role named in ``data.sentences`` takes that instead."""
    key = "max_sentences" if role == "train" else "max_eval_sentences"
    return data.get(key) or None


def cut_note(cut: dict) -> str:
    """A cut split in words: ``the first 20 of its 200 sentences (data.max_eval_sentences=20)`` or
    ``sentences 100-149 of its 200 (data.sentences.dev)``; ``cut``: one entry of :func:`load_corpus`'s ``cuts``."""
    what = (f"the first {cut['kept']} of its {cut['of']} sentences" if not cut["start"] else
            f"sentences {cut['start']}-{cut['start'] + cut['kept'] - 1} of its {cut['of']}")
    return f"{what} ({cut['by']})"


def deprel(data) -> str:
    """``data.deprel``: ``full`` (UD relations as written) or ``universal`` (subtypes stripped,
    ``nsubj:pass`` -> ``nsubj``); universal needs UD relations, i.e. CoNLL-U files."""
    value = data.get("deprel", "full")
    if value not in DEPRELS:
        raise ConfigError(f"config key 'data.deprel': expected one of {', '.join(DEPRELS)}, got {value!r}")
    if value == "universal" and (data.format not in UD_FORMATS or data.deps == "converted"):
        raise ConfigError(f"config key 'data.deprel': universal strips the subtypes of UD relations read from CoNLL-U "
                          f"(data.format=conllu, or ewt with data.deps=auto/ud), not of data.format={data.format} "
                          f"with data.deps={data.deps}; use full")
    return value


def _drop_layers(sentences: list[Sentence], layers, split: str) -> None:
    for layer in layers:
        if layer not in LAYER_FIELDS:
            raise ConfigError(f"config key 'data.unannotated.{split}': unknown layer {layer!r}; layers: {', '.join(LAYER_FIELDS)}")
        for s in sentences:
            for name in LAYER_FIELDS[layer]:
                setattr(s, name, None)


def _demo(data, role: str, split: str) -> list[Sentence]:
    sizes = dict(data.demo_sizes)
    folder = cache_dir() / "demo" / (f"seed{data.demo_seed}-" + "-".join(f"{k}{v}" for k, v in sorted(sizes.items())))
    paths = ensure_demo_corpus(folder, seed=data.demo_seed, sizes=sizes)
    if split not in paths:
        raise ConfigError(f"config key 'data.splits.{role}': the demo corpus has splits {', '.join(paths)}, not {split!r}")
    return read_conll2012(paths[split])


def _conll2012(data, role: str, split: str) -> list[Sentence]:
    if data.get(role):
        return read_conll2012(resolve_path(data[role], f"data.{role}"))
    if not data.path:
        raise ConfigError(f"config key 'data.path' (or data.{role}): needed for data.format=conll2012")
    return read_conll2012(resolve_path(str(Path(data.path) / split), "data.path"))


def _ewt(data, role: str, split: str) -> list[Sentence]:
    if not data.path:  # none of EWT_FOLDERS holds it (mtl_heads.config.locate_ewt)
        raise ConfigError(f"config key 'data.path': no EWT corpus in {' or '.join(EWT_FOLDERS)}; build it from its "
                          f"public sources with `{EWT_BUILD}` (offline, a small real corpus: `{small_corpus_command()}`), "
                          "or give data.path=<folder of en_ewt.*>")
    folder = resolve_path(data.path, "data.path")
    conll = folder / f"en_ewt.{split}.gold_conll"
    if not conll.exists():
        raise ConfigError(f"config key 'data.path': {conll} does not exist")
    sentences = read_conll2012(conll)
    conllu = folder / f"en_ewt.{split}.conllu"
    layers = (("deps",) if data.deps in ("auto", "ud") else ()) + (("pos",) if pos_column(data) == "upos" else ())
    if layers:
        if not conllu.exists():
            key, value = ("data.deps", data.deps) if "deps" in layers else ("data.pos", "upos")
            raise ConfigError(f"config key '{key}': {value} needs {conllu}, which does not exist")
        attach_conllu(sentences, read_conllu(conllu, pos="upos", deprel=deprel(data)), conllu, layers)
    return sentences


def _conllu(data, role: str, split: str) -> list[Sentence]:
    """One split of a CoNLL-U corpus: the file ``data.<split>`` (a file, or a folder searched as
    below), else the one file matching ``*-ud-<split>.conllu`` in the folder ``data.path``."""
    explicit = data.get(split) if split in ROLES else None
    if explicit:
        key = f"data.{split}"
        path = resolve_path(str(explicit), key)
    elif data.path:
        key = "data.path"
        path = resolve_path(str(data.path), key)
        if not path.is_dir():
            raise ConfigError(f"config key 'data.path': {path} is a file; expected a UD treebank folder holding "
                              f"*-ud-{{train,dev,test}}.conllu (or one file per split: data.train, data.dev, data.test)")
    else:
        raise ConfigError(f"config key 'data.path' (or data.{split}): needed for data.format=conllu: a UD treebank "
                          f"folder holding *-ud-{{train,dev,test}}.conllu, or data.{split}=<file>")
    if path.is_dir():
        path = find_split_file(path, split, key)
    sentences = read_conllu(path, pos=pos_column(data), deprel=deprel(data))
    if data.deps == "none":
        for s in sentences:
            s.heads = s.rels = None
    return sentences


def find_split_file(folder: Path, split: str, key: str) -> Path:
    """The one file ``*-ud-<split>.conllu`` in ``folder`` (UD's naming: ``de_gsd-ud-dev.conllu``);
    a ConfigError naming ``key`` when there is none or several."""
    pattern = f"*-ud-{split}.conllu"
    found = sorted(p for p in folder.glob(pattern) if p.is_file())
    name_it = f"data.{split}=<file>" if split in ROLES else "a folder holding only one of them"
    if not found:
        raise ConfigError(f"config key '{key}': no file matching {pattern} in {folder}; expected a UD treebank "
                          f"folder with one (or {name_it})")
    if len(found) > 1:
        raise ConfigError(f"config key '{key}': {len(found)} files match {pattern} in {folder} "
                          f"({', '.join(p.name for p in found)}); expected one: use {name_it}")
    return found[0]


def convert_trees(sentences: list[Sentence]) -> None:
    """Dependencies from constituency trees by head rules (see :mod:`mtl_heads.data.headrules`)."""
    for s in sentences:
        if s.tree is not None:
            s.heads, s.rels = tree_to_dependencies(s.tree)


def _hf(data, role: str, split: str) -> list[Sentence]:
    from mtl_heads.data.hf import load_hf_conll2012

    return load_hf_conll2012(config=data.hf_config, split=split)
