"""What differs per model family, for :class:`mtl_heads.model.encoder.GatedEncoder` and head removal.

- Where the attention modules live: :data:`ADAPTERS` (``model_type`` -> :class:`Adapter`, dotted
  paths of the layers, ``W_O`` and Q/K/V, and how Q/K/V are stored), encoders and decoder-only
  language models (grouped-query attention included).
- The attention geometry read from a config under each family's names: :func:`attention_shape`
  (:class:`AttentionShape`), and whether the model is causal (:func:`is_causal`).
- The tokenizer's word starts for pre-split words: :func:`tokenizer_kwargs`, :func:`word_tokenizer`.

A new architecture is one entry in :data:`ADAPTERS` here.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn


@dataclass(frozen=True)
class Adapter:
    """Dotted attribute paths of one architecture's attention modules.

    ``layers`` is relative to the bare ``AutoModel``; the others are relative to one layer.
    ``query``/``key``/``value`` are for physical head removal (slicing weights).

    ``qkv``: how Q/K/V are stored, for slicing heads out later:

    - ``"separate"``: three ``nn.Linear`` (weight ``[out, in]``); Q has ``heads * head_dim`` rows,
      K and V ``kv_heads * head_dim`` rows each (grouped-query attention when ``kv_heads < heads``:
      query head ``h`` reads KV head ``h // (heads // kv_heads)``).
    - ``"fused"``: one ``nn.Linear`` (``query == key == value``) whose rows are ``[Q | K | V]``
      (Phi-3 ``qkv_proj``).
    - ``"conv1d_fused"``: one ``Conv1D`` (weight ``[in, out]``, transposed vs ``nn.Linear``) whose
      COLUMNS are ``[Q | K | V]``, no GQA (GPT-2 ``c_attn``).

    ``out_proj_conv1d``: ``W_O`` is a ``Conv1D`` (GPT-2 ``c_proj``): head ``h`` is the weight's ROWS
    ``h * head_dim : (h + 1) * head_dim`` (the columns for ``nn.Linear``). The gate hook does not
    care: it scales the input either way.
    ``causal``: a decoder-only language model (each position sees only the ones before it).
    """

    layers: str
    out_proj: str
    query: str
    key: str
    value: str
    qkv: str = "separate"
    out_proj_conv1d: bool = False
    causal: bool = False


_BERT_LIKE = Adapter(
    layers="encoder.layer",
    out_proj="attention.output.dense",
    query="attention.self.query",
    key="attention.self.key",
    value="attention.self.value",
)

# model_type -> module paths, read in transformers 5.23 modeling_<name>.py.
ADAPTERS: dict[str, Adapter] = {
    "bert": _BERT_LIKE,
    "roberta": _BERT_LIKE,
    "xlm-roberta": _BERT_LIKE,
    "electra": _BERT_LIKE,
    # DeBERTa v2/v3 (DisentangledSelfAttention). With share_att_key=True the query/key
    # projections are also applied to the relative-position embeddings.
    "deberta-v2": Adapter(
        layers="encoder.layer",
        out_proj="attention.output.dense",
        query="attention.self.query_proj",
        key="attention.self.key_proj",
        value="attention.self.value_proj",
    ),
    "mpnet": Adapter(
        layers="encoder.layer",
        out_proj="attention.attn.o",
        query="attention.attn.q",
        key="attention.attn.k",
        value="attention.attn.v",
    ),
    "distilbert": Adapter(
        layers="transformer.layer",
        out_proj="attention.out_lin",
        query="attention.q_lin",
        key="attention.k_lin",
        value="attention.v_lin",
    ),
}

# Decoder-only language models (causal, often grouped-query attention). Read in transformers 5.23
# modeling_<name>.py: every one of these attention classes hands o_proj/c_proj the concatenated
# query-head contexts [batch, seq, num_attention_heads * head_dim].
_LLAMA_LIKE = Adapter(
    layers="layers",
    out_proj="self_attn.o_proj",
    query="self_attn.q_proj",
    key="self_attn.k_proj",
    value="self_attn.v_proj",
    causal=True,
)
ADAPTERS.update({
    "llama": _LLAMA_LIKE,
    "mistral": _LLAMA_LIKE,
    "qwen2": _LLAMA_LIKE,       # q/k/v with bias
    "qwen3": _LLAMA_LIKE,       # q_norm/k_norm per head (head_dim wide), head_dim set in the config
    "gemma": _LLAMA_LIKE,       # head_dim set in the config (256 in Gemma-7B: heads * head_dim != hidden)
    "gemma2": _LLAMA_LIKE,      # logit soft-capping: no SDPA, eager
    "gemma3_text": _LLAMA_LIKE,  # text-only Gemma 3 (Gemma3ForCausalLM checkpoints); q_norm/k_norm per head
    "olmo": _LLAMA_LIKE,
    "olmo2": _LLAMA_LIKE,       # q_norm/k_norm over all heads (heads * head_dim / kv_heads * head_dim wide)
    "olmo3": _LLAMA_LIKE,
    "phi3": Adapter(            # fused qkv_proj, rows [Q (heads*d) | K (kv*d) | V (kv*d)]
        layers="layers",
        out_proj="self_attn.o_proj",
        query="self_attn.qkv_proj",
        key="self_attn.qkv_proj",
        value="self_attn.qkv_proj",
        qkv="fused",
        causal=True,
    ),
    "gpt2": Adapter(            # Conv1D c_attn (columns [Q | K | V]) and Conv1D c_proj
        layers="h",
        out_proj="attn.c_proj",
        query="attn.c_attn",
        key="attn.c_attn",
        value="attn.c_attn",
        qkv="conv1d_fused",
        out_proj_conv1d=True,
        causal=True,
    ),
})

# Position ids start at pad_token_id + 1 in these models, so that many positions are unusable.
_PADDING_OFFSET_POSITIONS = {"roberta", "xlm-roberta", "camembert", "mpnet", "longformer"}
# Tokenizer classes that refuse pre-split words unless loaded with add_prefix_space=True.
_PREFIX_SPACE_TOKENIZERS = {"roberta", "longformer", "bart", "deberta", "gpt2"}


def tokenizer_kwargs(model_type: str) -> dict:
    """Keyword arguments for ``AutoTokenizer.from_pretrained`` of a ``model_type``'s tokenizer."""
    return {"use_fast": True, **({"add_prefix_space": True} if model_type in _PREFIX_SPACE_TOKENIZERS else {})}


def word_tokenizer(tokenizer, name: str):
    """Make a loaded tokenizer fit for pre-split words, in place; returns it.

    - It must be fast: word alignment needs ``word_ids()`` (else ValueError naming ``name``).
    - A byte-level BPE (GPT-2, RoBERTa, Qwen2, Llama 3, OLMo 2) marks a word start with a leading
      space, which pre-split words do not carry: fed ``["The", "dog"]`` it would encode ``dog`` as
      a word-inner piece, unlike the ``" dog"`` of running text it was trained on. Each word must
      get one space in front, as in running text:
      - a lone ``ByteLevel`` pre-tokenizer (GPT-2, RoBERTa) gets ``add_prefix_space=True``;
      - a ``Sequence`` of a regex ``Split`` then ``ByteLevel`` (Llama 3, Qwen2, OLMo 2) gets a
        ``Prepend(" ")`` normaliser, which runs once per pre-split word. ``add_prefix_space`` on
        its ``ByteLevel`` would put a space before every PIECE the regex cut the word into
        (``2024`` -> ``202`` + `` 4``, ``U.S.`` -> ``U`` + `` .S`` + `` .``), so it is turned off.
      The tokenizer classes of Llama 3 and many others ignore the ``add_prefix_space`` argument,
      hence this edit of the backend. SentencePiece-style ``Metaspace`` tokenizers (Llama 2,
      Mistral, Gemma) already mark every pre-split word. Applying it twice changes nothing (a
      removal folder saves the edited tokenizer).
    - One without a pad token pads with its eos token (padding is masked anyway), else ValueError.
    """
    import json

    from tokenizers import Tokenizer, normalizers

    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(
            f"the tokenizer of {name!r} is not a fast tokenizer; word alignment needs word_ids(). "
            "Convert it with the `tokenizers` library or choose an encoder with tokenizer.json."
        )
    backend = tokenizer.backend_tokenizer
    spec = json.loads(backend.to_str())
    pre = spec.get("pre_tokenizer") or {}
    if pre.get("type") == "ByteLevel" and not pre.get("add_prefix_space"):
        pre["add_prefix_space"] = True
        backend.pre_tokenizer = Tokenizer.from_str(json.dumps(spec)).pre_tokenizer
    inner = [p for p in pre.get("pretokenizers", []) if p.get("type") == "ByteLevel"] if pre.get("type") == "Sequence" else []
    if inner:
        if any(p.get("add_prefix_space") for p in inner):
            for part in inner:
                part["add_prefix_space"] = False
            backend.pre_tokenizer = Tokenizer.from_str(json.dumps(spec)).pre_tokenizer
        if not _prepends_space(spec.get("normalizer")):
            old = backend.normalizer
            backend.normalizer = normalizers.Prepend(" ") if old is None else normalizers.Sequence([old, normalizers.Prepend(" ")])
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"the tokenizer of {name!r} has neither a pad nor an eos token to pad with")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _prepends_space(normalizer: dict | None) -> bool:
    """Whether a normaliser (its JSON) already puts a space in front: ``Prepend(" ")``, alone or in a Sequence."""
    if not normalizer:
        return False
    if normalizer.get("type") == "Sequence":
        return any(_prepends_space(n) for n in normalizer.get("normalizers", []))
    return normalizer.get("type") == "Prepend" and normalizer.get("prepend") == " "


@dataclass(frozen=True)
class AttentionShape:
    """The attention geometry of a model, read from its config in one place (names differ per family).

    ``heads`` are QUERY heads (one gate each); ``kv_heads`` <= ``heads`` key/value heads (grouped-query
    attention; = ``heads`` without GQA); ``head_dim`` is the config's ``head_dim`` when it sets one
    (Gemma, Qwen3: ``heads * head_dim`` may differ from ``hidden``), else ``hidden // heads``;
    ``max_positions`` the position limit (``max_position_embeddings``, GPT-2 ``n_positions``).
    """

    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    max_positions: int


def _config_value(config, *names: str):
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return None


def attention_shape(config) -> AttentionShape:
    """:class:`AttentionShape` of a transformers config (BERT-style, Llama-style or GPT-2-style names)."""
    layers = _config_value(config, "num_hidden_layers", "n_layer", "n_layers", "num_layers")
    heads = _config_value(config, "num_attention_heads", "n_head", "n_heads", "num_heads")
    hidden = _config_value(config, "hidden_size", "n_embd", "dim", "d_model")
    max_positions = _config_value(config, "max_position_embeddings", "n_positions", "n_ctx")
    missing = [n for n, v in (("layers", layers), ("heads", heads), ("hidden size", hidden),
                              ("max positions", max_positions)) if v is None]
    if missing:
        raise ValueError(f"the config of model_type {config.model_type!r} has no {', '.join(missing)} "
                         "under any name GatedEncoder knows (mtl_heads/model/architectures.py attention_shape)")
    kv_heads = _config_value(config, "num_key_value_heads", "n_kv_heads", "num_kv_heads") or heads
    head_dim = _config_value(config, "head_dim") or hidden // heads
    return AttentionShape(int(layers), int(heads), int(kv_heads), int(head_dim), int(hidden), int(max_positions))


def is_causal(config) -> bool:
    """A decoder-only (causal) model: its ``model_type`` is a decoder adapter, or ``is_decoder`` is set."""
    adapter = ADAPTERS.get(config.model_type)
    return bool((adapter is not None and adapter.causal) or getattr(config, "is_decoder", False))


def _in_features(proj: nn.Module) -> int:
    """Input width of a projection: ``nn.Linear`` (weight ``[out, in]``) or ``Conv1D`` (weight ``[in, out]``)."""
    if isinstance(proj, nn.Linear):
        return proj.in_features
    if hasattr(proj, "nx"):  # transformers.pytorch_utils.Conv1D
        return proj.nx
    return proj.weight.shape[1]


def _unknown_architecture(model_type: str) -> ValueError:
    return ValueError(
        f"GatedEncoder does not know where the attention modules of model_type {model_type!r} live. "
        f"Add an entry ADAPTERS[{model_type!r}] in mtl_heads/model/architectures.py with the dotted paths "
        f"(read them in transformers/models/<name>/modeling_<name>.py), e.g. the BERT entry: "
        f"ADAPTERS['bert'] = {_BERT_LIKE!r}. Known model types: {sorted(ADAPTERS)}"
    )
