"""Which files feed a run: the ``data`` section of the config -> sentences per role.

Roles are ``train``, ``dev`` and ``test``; ``data.splits`` says which corpus split plays each role
(for EWT NER, ``data.splits.train=dev``).
"""
from __future__ import annotations

import os
from pathlib import Path

from mtl_heads.config import CONFIG_DIR, ConfigError
from mtl_heads.data.conll2012 import read_conll2012
from mtl_heads.data.conllu import attach_conllu, read_conllu
from mtl_heads.data.sentence import Sentence

ROLES = ("train", "dev", "test")
# where dependencies come from: auto = UD from an aligned CoNLL-U file when the corpus has one
# (EWT), else converted from the constituency trees by head rules
DEPS = ("auto", "ud", "converted", "none")
LAYER_FIELDS = {"pos": ("pos",), "tree": ("tree",), "entities": ("entities",),
                "srl": ("predicates", "arguments"), "deps": ("heads", "rels")}


def cache_dir() -> Path:
    """Where generated files go (``$MTL_HEADS_CACHE``, default ``~/.cache/mtl_heads``)."""
    return Path(os.environ.get("MTL_HEADS_CACHE", Path.home() / ".cache" / "mtl_heads"))


def resolve_path(value: str, key: str) -> Path:
    """A path from the config: as given (relative to the working folder), else relative to the
    project folder; a missing path is an error naming the key."""
    for candidate in (Path(value).expanduser(), CONFIG_DIR.parent / value):
        if candidate.exists():
            return candidate
    raise ConfigError(f"config key '{key}': path {value!r} does not exist")


def load_corpus(data, layers: set[str] | None = None) -> dict[str, list[Sentence]]:
    """Sentences for each role, read per ``data.format`` (demo | conll2012 | ewt | hf).

    Args:
        data: the config's ``data`` section.
        layers: the layers the run's tasks need (default: all); dependencies are converted from
            trees only when ``deps`` is among them.
    """
    readers = {"demo": _demo, "conll2012": _conll2012, "ewt": _ewt, "hf": _hf}
    if data.format not in readers:
        raise ConfigError(f"config key 'data.format': expected one of {', '.join(readers)}, got {data.format!r}")
    if data.deps not in DEPS:
        raise ConfigError(f"config key 'data.deps': expected one of {', '.join(DEPS)}, got {data.deps!r}")
    if data.deps == "ud" and data.format != "ewt":
        raise ConfigError(f"config key 'data.deps': ud needs aligned CoNLL-U files (data.format=ewt), "
                          f"not data.format={data.format}; use converted")
    convert = layers is None or "deps" in layers
    splits = dict(data.splits)
    corpus = {}
    for role in ROLES:
        split = splits.get(role, role)
        sentences = readers[data.format](data, role, split)
        if convert and (data.deps == "converted" or (data.deps == "auto" and not any(s.has("deps") for s in sentences))):
            convert_trees(sentences)
        _drop_layers(sentences, (data.unannotated or {}).get(split, []), split)
        if data.max_sentences:
            sentences = sentences[: data.max_sentences]
        corpus[role] = sentences
    return corpus


def _drop_layers(sentences: list[Sentence], layers, split: str) -> None:
    for layer in layers:
        if layer not in LAYER_FIELDS:
            raise ConfigError(f"config key 'data.unannotated.{split}': unknown layer {layer!r}; layers: {', '.join(LAYER_FIELDS)}")
        for s in sentences:
            for name in LAYER_FIELDS[layer]:
                setattr(s, name, None)


def _demo(data, role: str, split: str) -> list[Sentence]:
    from mtl_heads.data.demo import ensure_demo_corpus

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
    return read_conll2012(resolve_path(str(Path(data.path) / split), f"data.path"))


def _ewt(data, role: str, split: str) -> list[Sentence]:
    if not data.path:
        raise ConfigError("config key 'data.path': needed for data.format=ewt (folder of en_ewt.*)")
    folder = resolve_path(data.path, "data.path")
    conll = folder / f"en_ewt.{split}.gold_conll"
    if not conll.exists():
        raise ConfigError(f"config key 'data.path': {conll} does not exist")
    sentences = read_conll2012(conll)
    conllu = folder / f"en_ewt.{split}.conllu"
    if data.deps in ("auto", "ud"):
        if not conllu.exists():
            raise ConfigError(f"config key 'data.deps': {data.deps} needs {conllu}, which does not exist")
        attach_conllu(sentences, read_conllu(conllu), conllu)
    return sentences


def convert_trees(sentences: list[Sentence]) -> None:
    """Dependencies from constituency trees by head rules (see :mod:`mtl_heads.data.headrules`)."""
    from mtl_heads.data.headrules import tree_to_dependencies

    for s in sentences:
        if s.tree is not None:
            s.heads, s.rels = tree_to_dependencies(s.tree)


def _hf(data, role: str, split: str) -> list[Sentence]:
    from mtl_heads.data.hf import load_hf_conll2012

    return load_hf_conll2012(config=data.hf_config, split=split)
