"""Mixed precision in one place: which runs use bf16 autocast, and how structured computations
are kept in fp32 inside it.

``precision`` (the run config's key): ``auto`` = bf16 autocast on CUDA, fp32 elsewhere; ``bf16`` =
bf16 autocast on any device (``torch.autocast("cpu", dtype=torch.bfloat16)`` on CPU, which is how
the tests exercise the CUDA code path without a GPU); ``fp32`` = never autocast.

Inside an autocast region, matmul-like ops (``mm``, ``bmm``, ``matmul``, ``einsum``, ``linear``,
``baddbmm``, SDPA ...) run in bf16 whatever their inputs, so ``x.float()`` alone does not make a
computation fp32: the CRF partition functions, tree CRFs, MST/Eisner decoding, the L0 penalty and
the cross-entropies over spans run under :func:`full_precision` (autocast disabled, inputs cast
to float32), via the :func:`fp32` decorator or the context manager.

Example::

    with autocast(device, cfg.precision):
        loss, _ = model(batch, task, targets)      # decoders' structured parts still run in fp32
"""
from __future__ import annotations

import functools
from contextlib import ExitStack, contextmanager
from typing import Any, Callable, Iterator, TypeVar

import torch

from mtl_heads.config import PRECISIONS, ConfigError

__all__ = ["PRECISIONS", "uses_bf16", "autocast", "full_precision", "to_fp32", "fp32"]

# device types whose autocast state full_precision() switches off when no device is named
_AUTOCAST_TYPES = ("cpu", "cuda", "xpu", "mps", "hpu")

F = TypeVar("F", bound=Callable[..., Any])


def _device_type(device: torch.device | str) -> str:
    return device.type if isinstance(device, torch.device) else torch.device(device).type


def uses_bf16(device: torch.device | str, precision: str) -> bool:
    """Whether a run on ``device`` with ``precision`` (auto | fp32 | bf16) runs under bf16 autocast:
    ``auto`` on CUDA only, ``bf16`` everywhere, ``fp32`` never. Anything else is a ConfigError."""
    if precision not in PRECISIONS:
        raise ConfigError(f"config key 'precision': expected one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "auto":
        return _device_type(device) == "cuda"
    return precision == "bf16"


def autocast(device: torch.device | str, precision: str) -> torch.autocast:
    """``torch.autocast(device type, dtype=bfloat16, enabled=uses_bf16(device, precision))``: the
    autocast region of training steps and evaluation. With bf16 off it is a region where autocast
    is disabled (as ``torch.autocast(..., enabled=False)`` always is)."""
    return torch.autocast(_device_type(device), dtype=torch.bfloat16, enabled=uses_bf16(device, precision))


@contextmanager
def full_precision(device: torch.device | str | None = None) -> Iterator[None]:
    """A region where autocast is off, so float32 inputs give float32 results even for matmul-like
    ops. ``device``: the device (type) whose autocast is switched off; default: every device type
    whose autocast is on here. Cast the inputs with :func:`to_fp32` (or use :func:`fp32`)."""
    types = ([_device_type(device)] if device is not None
             else [t for t in _AUTOCAST_TYPES if _autocast_enabled(t)])
    with ExitStack() as stack:
        for device_type in types:
            stack.enter_context(torch.autocast(device_type, enabled=False))
        yield


def _autocast_enabled(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except (RuntimeError, TypeError, ValueError):  # a device type this build does not know
        return False


def to_fp32(obj):
    """``obj`` with every floating tensor of lower precision (bf16, fp16) cast to float32; tensors
    of float32/float64 and non-float tensors are returned as they are. Recurses into lists, tuples
    (named tuples too) and dicts."""
    if isinstance(obj, torch.Tensor):
        return obj.float() if obj.is_floating_point() and obj.dtype not in (torch.float32, torch.float64) else obj
    if isinstance(obj, dict):
        return {k: to_fp32(v) for k, v in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(to_fp32(v) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_fp32(v) for v in obj)
    return obj


def fp32(fn: F) -> F:
    """Decorator: run ``fn`` under :func:`full_precision` with its tensor arguments cast to
    float32 (:func:`to_fp32`). For structured computations (CRFs, tree algorithms, span softmaxes,
    the L0 penalty) called from inside an autocast region."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with full_precision():
            return fn(*to_fp32(args), **to_fp32(kwargs))

    return wrapper  # type: ignore[return-value]
