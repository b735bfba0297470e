"""Streaming the corpus through the encoder once per pass and feeding every probe.

A pass tokenises a role once, batches it by length, runs the encoder with capture (eager
attention maps + gated head contexts, or only the head contexts through ``W_O`` hooks when no probe
of the pass reads attention maps, which keeps the fast attention kernel), wraps the outputs in a
:class:`probes.base.ProbeBatch` and hands it to each probe. Probes with a ``fit_split`` get a first
pass over that role (``fit``) before the main pass over the probed split (``update``).
"""
from __future__ import annotations

import time
from typing import Callable, Iterator

import torch

from mtl_heads.config import ConfigError
from mtl_heads.data.batching import Example, collate, length_batches, tokenize
from mtl_heads.model.precision import full_precision
from mtl_heads.progress import Unit, progress_bar
from probes.base import Probe, ProbeBatch, ProbeContext, capture_head_contexts

__all__ = ["examples_for", "probe_batches", "run_probes"]


def examples_for(context: ProbeContext, role: str) -> list[Example]:
    """The tokenised sentences of ``role`` (tokenised once, cached in ``context``)."""
    if role not in context.examples:
        if role not in context.corpus:
            raise ConfigError(f"no role {role!r} in the corpus; roles: {', '.join(context.corpus)}")
        tokenizer = context.encoder.tokenizer
        examples, report = tokenize(context.corpus[role], tokenizer, context.encoder.max_length, context.long_policy)
        context.examples[role], context.tokenize_reports[role] = examples, report
    return context.examples[role]


def probe_batches(encoder, examples: list[Example], batch_size: int, device: torch.device,
                  attentions: bool = True, progress: bool = False, desc: str = "") -> Iterator[ProbeBatch]:
    """Batches of ``examples`` (sorted by length) after a forward pass, as :class:`ProbeBatch`.

    Args:
        encoder: a ``GatedEncoder`` in eval mode on ``device``.
        batch_size: sentences per batch.
        attentions: capture attention maps too (eager attention); False: head contexts only.
        progress: show a progress bar named ``desc`` (plain lines when stderr is not a terminal).
    """
    pad = encoder.tokenizer.pad_token_id if encoder.tokenizer.pad_token_id is not None else 0
    order = length_batches([len(e.input_ids) for e in examples], batch_size)
    if progress:
        order = progress_bar(order, desc=desc, unit=Unit("batch"))
    with capture_head_contexts(encoder) if not attentions else _nothing() as store:
        for indices in order:
            chosen = [examples[i] for i in indices]
            batch = collate(chosen, pad, device)
            with torch.no_grad():
                out = encoder(batch["input_ids"], batch["attention_mask"], capture=attentions)
            maps, contexts = out.attentions, (out.head_contexts if attentions else list(store))
            del out  # the ProbeBatch is the only holder of the captured tensors (freed once stacked)
            yield ProbeBatch([e.sentence for e in chosen], batch["word_index"], batch["attention_mask"], maps, contexts)
            del maps, contexts


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def run_probes(probes: dict[str, Probe], context: ProbeContext, batch_size: int = 32, progress: bool = False,
               log: Callable[[str], None] = print) -> dict:
    """Set up every probe, stream the passes they need, and return timings.

    Returns:
        ``{"passes": [{"role", "purpose", "probes", "batches", "seconds"}], "seconds": total}``.
    """
    started = time.perf_counter()
    context.encoder.eval()
    for probe in probes.values():
        probe.setup(context)
    streamed = {name: p for name, p in probes.items() if p.streamed}
    passes = []
    fit_roles = list(dict.fromkeys(p.fit_split for p in streamed.values() if p.fit_split))
    for role in fit_roles:
        group = [p for p in streamed.values() if p.fit_split == role]
        passes.append(_stream(group, context, role, "fit", batch_size, progress, log))
        for probe in group:
            probe.end_fit()
    if streamed:
        passes.append(_stream(list(streamed.values()), context, context.split, "update", batch_size, progress, log))
    for name, probe in probes.items():
        if not probe.streamed:
            t = time.perf_counter()
            probe.compute(context)
            passes.append({"role": context.split, "purpose": "compute", "probes": [name],
                           "seconds": round(time.perf_counter() - t, 2)})
    return {"passes": passes, "seconds": round(time.perf_counter() - started, 2)}


def _stream(group: list[Probe], context: ProbeContext, role: str, purpose: str, batch_size: int, progress: bool,
            log: Callable) -> dict:
    t = time.perf_counter()
    examples = examples_for(context, role)
    attentions = any(p.uses_attentions if purpose == "update" else p.fit_uses_attentions for p in group)
    n = 0
    for batch in probe_batches(context.encoder, examples, batch_size, context.device, attentions, progress,
                               f"{purpose} {role}"):
        # the encoder pass may run under bf16 autocast; the probes' statistics (matmul and bmm
        # included: clark's punctuation sums, clustering's similarities) run with autocast off
        with full_precision():
            for probe in group:
                probe.fit(batch) if purpose == "fit" else probe.update(batch)
        n += 1
        del batch  # free this batch's views before the next forward pass
    seconds = round(time.perf_counter() - t, 2)
    names = [p.name for p in group]
    log(f"{purpose} pass over '{role}' ({', '.join(names)}): {len(examples)} sentences, {n} batches, {seconds} s")
    return {"role": role, "purpose": purpose, "probes": names, "batches": n, "seconds": seconds}
