"""Reproducible mode (``reproducible=true``): the same config trained on another machine of the same
kind gives the same weights, byte for byte.

On CPU three things decide the last bits of a run's floats besides its seed, and so its weights
(measured on this project's machines: docs/guides/training.md, *Reproducible runs*):

- the kernels the machine's instruction set selects: torch's own (``ATEN_CPU_CAPABILITY``: AVX512 on
  one machine, AVX2 on another), MKL's BLAS (``MKL_CBWR``, its conditional numerical reproducibility
  code path) and oneDNN's (``ONEDNN_MAX_CPU_ISA``, bf16 matrix products);
- the number of threads, which splits every parallel sum differently;
- algorithms that are not deterministic (none known on CPU; on CUDA, atomics and cuBLAS workspaces).

The mode pins each: the kernels to AVX2, which every x86-64 machine this project runs on has
(:data:`PINS`; they are read once, when torch is imported or first calls MKL, so they must be in the
environment before ``import torch``); the threads to ``threads`` (1 unless given), recorded in the run's
``config.yaml`` so that a resumed or reproduced run uses the same count whatever its environment says;
and ``torch.use_deterministic_algorithms(True)``, with PyTorch's CUDA reproducibility settings
(``CUBLAS_WORKSPACE_CONFIG``, cuDNN without benchmarking). The command line entry points
(``python -m mtl_heads train``, ``python -m mtl_heads.train``, ``python -m mtl_heads reproduce``) call
:func:`pin_environment` before they import torch. A library user who imported torch first gets a
:class:`~mtl_heads.config.ConfigError` from :func:`enter` that says what to do, never silently other
numbers.

What cannot be pinned: on a CPU other than x86-64 (aarch64) the kernels are left as they are (only
the threads and deterministic algorithms are pinned), and the record says so (``pinned: false`` in
the ``reproducible`` facts); a run reproduces only on the same torch and MKL versions, which the
record names. This module imports no torch at module level: it sits below everything that does.
"""
from __future__ import annotations

import contextlib
import os
import platform
from pathlib import Path
from typing import Callable, Iterator

from mtl_heads.config import RULES, ConfigError, load_saved_config
from mtl_heads.files import read_json
from mtl_heads.folders import RUNS, newest_unfinished_run, seed_dir

# the environment the kernels are pinned by, on x86-64 (read by torch, MKL and oneDNN when they start)
PINS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
# PyTorch's CUDA reproducibility notes: cuBLAS's workspace size fixed (read when CUDA starts)
CUDA_PINS = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # what torch and MKL take their default count from
DEFAULT_THREADS = 1  # threads=auto in reproducible mode: what every machine of this kind has, and the study's count


def kernels_pinnable() -> bool:
    """Whether this machine's kernels can be pinned (x86-64: AVX2 is on every machine of the kind)."""
    return platform.machine().lower() in ("x86_64", "amd64")


def threads_of(cfg) -> int | None:
    """The thread count a config asks for: ``threads`` as a number, or for ``threads=null`` (or ``auto``)
    1 in reproducible mode (:data:`DEFAULT_THREADS`) and None (torch's own default) otherwise."""
    value = cfg.get("threads", None)
    expected = RULES["threads"](value)  # the config's own check (a config built without load_config meets it here)
    if expected:
        raise ConfigError(f"config key 'threads': expected {expected}, got {value!r}")
    if value in (None, "auto"):
        return DEFAULT_THREADS if cfg.get("reproducible", False) else None
    return value


def environment(threads: int) -> dict[str, str]:
    """The variables reproducible mode sets before torch starts, for ``threads`` threads."""
    pins = {**(PINS if kernels_pinnable() else {}), **CUDA_PINS}
    return {**pins, **{name: str(threads) for name in THREAD_VARIABLES}}


def pin_environment(threads: int, env: dict | None = None) -> list[str]:
    """Put reproducible mode's variables (:func:`environment`) into ``env`` (default ``os.environ``),
    which must happen before torch is imported. Returns a note for each value it replaced (a run
    started with ``OMP_NUM_THREADS=2`` runs at the recorded count, and says so)."""
    env = os.environ if env is None else env
    notes = []
    for name, value in environment(threads).items():
        if env.get(name) not in (None, value):
            notes.append(f"{name}={env[name]} in the environment replaced by {value}")
        env[name] = value
    return notes


def run_config_of(cfg):
    """The config a ``train`` command line will run with, read without torch: a resumed run's saved
    ``config.yaml`` (for ``seeds=``, the first seed's that exists), else ``cfg`` itself."""
    if not cfg.get("resume"):
        return cfg
    if cfg.get("seeds"):
        parent = Path(cfg.run_dir) if cfg.run_dir else RUNS / str(cfg.experiment)
        saved = [seed_dir(parent, s) / "config.yaml" for s in cfg.seeds]
        saved = [path for path in saved if path.is_file()]
    else:
        saved = [(Path(cfg.run_dir) if cfg.run_dir else newest_unfinished_run()) / "config.yaml"]
    return load_saved_config(saved[0]) if saved and saved[0].is_file() else cfg


def pin_command(cfg, log: Callable[[str], None] = print) -> None:
    """What a command line entry point calls before it imports torch: with ``reproducible=true`` in the
    config it will run with (:func:`run_config_of`), :func:`pin_environment` at its thread count, each
    replaced value said."""
    source = run_config_of(cfg)
    if source.get("reproducible", False):
        for note in pin_environment(threads_of(source)):
            log(f"note: {note} (reproducible=true)")


def pin_record(record: str | Path, log: Callable[[str], None] = print) -> None:
    """Before torch is imported, the environment a run folder's record was trained under, so that it can
    be trained again (``python -m mtl_heads reproduce``): its reproducible mode's pins and threads, or for a
    record trained without the mode, the thread count and CPU capability its ``metrics.json`` names
    (``machine``), which is the closest a rerun can come (MKL's code path was not recorded)."""
    record = Path(record)
    cfg = load_saved_config(record / "config.yaml")
    if cfg.get("reproducible", False):
        pin_command(cfg, log)
        return
    machine = (read_json(record / "metrics.json") or {}).get("machine") or {}
    env = {name: str(machine["threads"]) for name in THREAD_VARIABLES if isinstance(machine.get("threads"), int)}
    if machine.get("cpu_capability") and kernels_pinnable():
        env["ATEN_CPU_CAPABILITY"] = str(machine["cpu_capability"]).lower()
    log(f"note: {record} was trained without reproducible mode: trained again with its recorded "
        + (", ".join(f"{k}={v}" for k, v in env.items()) or "nothing (it records no threads or CPU kernels)")
        + "; other machines or libraries may still give other last bits")
    os.environ.update(env)


def unpinned() -> list[str]:
    """What differs, in this process, from reproducible mode's kernels: torch imported before
    :func:`pin_environment` (another CPU capability), or a variable missing. Empty when pinned."""
    import torch

    problems = []
    if kernels_pinnable():
        want = PINS["ATEN_CPU_CAPABILITY"].upper()
        have = torch.backends.cpu.get_cpu_capability()
        if have != want:
            problems.append(f"torch's CPU kernels are {have}, not {want}")
        problems += [f"{name} is {os.environ[name]!r}, not {value!r}" if name in os.environ else f"{name} is not set"
                     for name, value in PINS.items() if os.environ.get(name) != value]
    if torch.cuda.is_available():  # deterministic cuBLAS needs its workspace fixed before CUDA starts
        problems += [f"{name} is not {value!r}" for name, value in CUDA_PINS.items() if os.environ.get(name) != value]
    return problems


def facts(threads: int) -> dict:
    """What a reproducible run records of its pins (metrics.json's ``reproducible``)."""
    import torch

    return {"threads": threads, "pinned": kernels_pinnable(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            **{name.lower(): os.environ.get(name) for name in (*PINS, *CUDA_PINS)},
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled()}


@contextlib.contextmanager
def enter(cfg, log: Callable[[str], None] = print) -> Iterator[dict | None]:
    """Run the block under ``cfg``'s thread count and, with ``reproducible=true``, reproducible mode;
    yields the mode's :func:`facts` (None when it is off). The threads and the deterministic-algorithms
    flag are put back afterwards (a library user's process goes on as it was).

    Raises :class:`~mtl_heads.config.ConfigError` when the mode is asked for and the kernels are not
    pinned (torch was imported first): what to do instead is in the message."""
    import torch

    threads = threads_of(cfg)
    before = (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled(),
              torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)
    on = bool(cfg.get("reproducible", False))
    if on:
        problems = unpinned()
        if problems:
            setting = " ".join(f"{k}={v}" for k, v in environment(threads).items())
            raise ConfigError(
                "config key 'reproducible': the CPU kernels are not pinned in this process (" + "; ".join(problems)
                + "): torch was imported before reproducible mode could pin them. Train through the command line "
                "(python -m mtl_heads train ... reproducible=true pins them itself), call "
                f"mtl_heads.reproducible.pin_environment({threads}) before importing torch, or start Python with "
                f"{setting}; or pass reproducible=false (other machines then give other last bits)")
        for name in THREAD_VARIABLES:  # the environment asked for another count: the recorded one wins, said
            if os.environ.get(name) not in (None, str(threads)):
                log(f"note: {name}={os.environ[name]} in the environment; this reproducible run uses its "
                    f"recorded {threads} thread{'s' if threads != 1 else ''} (config key 'threads')")
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        if on:
            torch.use_deterministic_algorithms(True)
            torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = False, True
        yield facts(threads) if on else None
    finally:
        torch.set_num_threads(before[0])
        torch.use_deterministic_algorithms(before[1])
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = before[2], before[3]
