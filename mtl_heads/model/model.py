"""The multi-task model: one shared gated encoder, one decoder per task."""
from __future__ import annotations

import torch
from torch import nn

from mtl_heads.model.encoder import EncoderOutput, GatedEncoder


class MultiTaskModel(nn.Module):
    """``GatedEncoder`` + ``{task name: decoder}``.

    Args:
        encoder: the shared gated encoder.
        tasks: ``{name: Task}`` with label vocabularies already built.

    The sparsity term of pruning is not part of the model: the trainer adds it
    (``mtl_heads.model.sparsity``).
    """

    def __init__(self, encoder: GatedEncoder, tasks: dict):
        super().__init__()
        self.encoder = encoder
        self.tasks = tasks
        self.decoders = nn.ModuleDict({name: task.build_decoder(encoder.hidden_size) for name, task in tasks.items()})

    def encode(self, batch: dict) -> EncoderOutput:
        """The shared encoder's pass over ``batch`` (``input_ids``, ``attention_mask``, ``word_index``
        ``[batch, seq]``; ``word_mask`` ``[batch, n_words]``): ``hidden`` ``[batch, seq, hidden]`` and
        ``words`` ``[batch, n_words, hidden]`` (each word's sub-words averaged)."""
        return self.encoder(batch["input_ids"], batch["attention_mask"], word_index=batch["word_index"],
                            word_mask=batch["word_mask"])

    def scores(self, encoded: EncoderOutput, batch: dict, task: str):
        """Scores of ``task``'s decoder on an encoder output (whatever its ``forward`` returns)."""
        decoder = self.decoders[task]
        # [batch, n_words, hidden], or [batch, 1 + n_words, hidden] with the root vector first (dep):
        # [CLS] for encoders, BOS or a learnt vector for decoder-only models (EncoderOutput.root)
        root = encoded.root if encoded.root is not None else encoded.hidden[:, 0]  # [batch, hidden]
        words = torch.cat((root.unsqueeze(1), encoded.words), 1) if _with_root(decoder) else encoded.words
        return decoder(words, decoder_mask(decoder, batch["word_mask"]))

    def forward(self, batch: dict, task: str, targets=None):
        """Scores of ``task`` for ``batch``; with ``targets``, returns ``(loss, scores)``.

        The loss is computed here, inside ``forward``, so that DistributedDataParallel sees every
        parameter it uses (CRF transitions, gates) in one graph.
        """
        scores = self.scores(self.encode(batch), batch, task)
        if targets is None:
            return scores
        decoder = self.decoders[task]
        return decoder.loss(scores, targets, decoder_mask(decoder, batch["word_mask"])), scores

    @torch.no_grad()
    def decode(self, batch: dict, task: str) -> list:
        """Predictions of ``task`` for ``batch``, one per sentence (through ``forward``; for several
        tasks on one batch, :meth:`decode_all` runs the encoder once)."""
        decoder = self.decoders[task]
        return decoder.decode(self.forward(batch, task), decoder_mask(decoder, batch["word_mask"]))

    @torch.no_grad()
    def decode_all(self, batch: dict, tasks=None) -> dict[str, list]:
        """``{task: [prediction per sentence]}`` for every task in ``tasks`` (default: all the
        model's tasks): the encoder runs ONCE for the batch and every decoder reads its output."""
        names = list(self.decoders) if tasks is None else list(tasks)
        unknown = [t for t in names if t not in self.decoders]
        if unknown:
            raise KeyError(f"no decoder for task {', '.join(unknown)}; the model has {', '.join(self.decoders)}")
        encoded = self.encode(batch)  # one pass: hidden [batch, seq, hidden], words [batch, n_words, hidden]
        out = {}
        for task in names:
            decoder = self.decoders[task]
            out[task] = decoder.decode(self.scores(encoded, batch, task), decoder_mask(decoder, batch["word_mask"]))
        return out

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """Parameters split into ``encoder``, ``decoder`` and ``gate`` groups (own learning rates)."""
        gate_ids = {id(p) for p in self.encoder.gate.parameters()} if self.encoder.gate is not None else set()
        groups = {"encoder": [], "decoder": [], "gate": []}
        for p in self.encoder.parameters():
            groups["gate" if id(p) in gate_ids else "encoder"].append(p)
        groups["decoder"] = list(self.decoders.parameters())
        return groups


def _with_root(decoder: nn.Module) -> bool:
    return getattr(decoder, "with_root", False)


def decoder_mask(decoder: nn.Module, word_mask: torch.Tensor) -> torch.Tensor:
    """The mask a decoder sees: ``word_mask`` ``[batch, n_words]``, or for a decoder with
    ``with_root = True`` (dependency parsing) ``[batch, 1 + n_words]``: the root vector
    (``EncoderOutput.root``: [CLS] for encoders) is prepended to the word vectors."""
    if not _with_root(decoder):
        return word_mask
    return torch.cat((word_mask.new_ones(word_mask.shape[0], 1), word_mask), 1)
