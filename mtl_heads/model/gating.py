"""Head gates: one multiplicative value per attention head, on a ``[layers, heads]`` grid.

A gate scales each head's context vector before the output projection,
``MultiHead = Concat_i(g_i * head_i) W_O`` (Voita et al. 2019, "Analyzing Multi-Head Self-Attention").
Every gate is an ``nn.Module`` with the same three verbs:

- ``forward()`` -> ``[layers, heads]``: the values used by this forward pass;
- ``penalty()`` -> scalar: the sparsity penalty (expected L0; 0 for fixed gates);
- ``values()`` -> ``[layers, heads]``: deterministic values, detached, for saving and reports.

``build_gate(kind, layers, heads, **kwargs)`` builds one from the plain ``GATES`` dict;
kind ``"none"`` gives ``None``, which means "install no hook at all".

Grouped-query attention (``encoder.gate_groups=kv``): ``build_gate(..., group_size=n_rep)`` gives one
gate per key/value group, shared by the group's ``n_rep`` query heads (query head ``h`` is in group
``h // n_rep``). A learnt gate is a :class:`GroupedGate` around a ``[layers, heads // n_rep]`` gate; a
fixed gate is expanded once. Either way the three verbs still return ``[layers, heads]`` query-head
grids, so the encoder hook, masks, saved gate values and reports see one value per query head.

The "head kept" cut-off lives here, once: a head is kept when its deterministic gate is at least
:data:`KEPT_AT` (:func:`kept_count` counts them); so does the Hard Concrete eval gate,
:func:`deterministic_gate`, which the gate reports use to know a run's initial gate range.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from mtl_heads.model.gate_constants import BETA, INIT_MEAN, INIT_RANGE, STRETCH
from mtl_heads.model.precision import fp32

__all__ = ["deterministic_gate", "HardConcreteGate", "FixedGate", "MaskedGate", "GroupedGate", "GATES", "GateMaskError",
           "build_gate", "expand_groups"]

def deterministic_gate(log_alpha, l: float = STRETCH[0], r: float = STRETCH[1]) -> torch.Tensor:  # noqa: E741
    """The Hard Concrete eval gate, ``clamp(sigmoid(log_alpha) * (r - l) + l, 0, 1)``, same shape as ``log_alpha``.

    Args:
        log_alpha: a tensor (its dtype and gradient kept), or numbers (a float64 tensor is made).
        l, r: the stretch interval. Default: :data:`STRETCH`, (-0.1, 1.1).
    """
    if not isinstance(log_alpha, torch.Tensor):
        log_alpha = torch.as_tensor(log_alpha, dtype=torch.float64)
    return (torch.sigmoid(log_alpha) * (r - l) + l).clamp(0.0, 1.0)


class GateMaskError(ValueError):
    """A fixed gate mask of the wrong shape or with values outside [0, 1] (``encoder.gate_mask``)."""


class HardConcreteGate(nn.Module):
    r"""Learnt gates with the Hard Concrete relaxation of L0 (Louizos et al. 2018).

    Args:
        layers, heads: grid size.
        beta (float): temperature of the concrete distribution. Default: 0.33.
        l, r (float): stretch interval ``(l, r)``, ``l < 0 < 1 < r``. Default: -0.1, 1.1.
        init_range (float): ``log_alpha`` is initialised ``U(init_mean - init_range, init_mean + init_range)``.
            Default: 0.68.
        init_mean (float): centre of that interval. Default: 0.0 (the reference scripts; eval
            gates start near 0.5). A positive centre (e.g. 3.0) starts with the heads open.
        eval_keep_expected (bool): eval rule for budget runs. Default: False (the reference rule:
            a head is off when its deterministic gate is below :data:`KEPT_AT`). True: keep exactly
            ``round(sum of expected L0)`` heads, those with the largest ``log_alpha``, and set the
            others to 0 (as CoFi does, Xia et al. 2022), so that a run that meets its budget in
            expectation also meets it in the kept-head count.

    In training mode every call draws one fresh sample per head:
    ``u ~ U(0, 1)``, ``s = sigmoid((log u - log(1 - u) + log_alpha) / beta)``,
    ``g = clamp(s * (r - l) + l, 0, 1)``. In eval mode it returns the deterministic
    ``clamp(sigmoid(log_alpha) * (r - l) + l, 0, 1)``.
    """

    # keeps log(u) and log(1 - u) finite in float32
    EPS = 1e-6

    def __init__(
        self,
        layers: int,
        heads: int,
        beta: float = BETA,
        l: float = STRETCH[0],  # noqa: E741 - the paper's name
        r: float = STRETCH[1],
        init_range: float = INIT_RANGE,
        init_mean: float = INIT_MEAN,
        eval_keep_expected: bool = False,
    ):
        super().__init__()
        if not (l < 0.0 < 1.0 < r):
            raise ValueError(f"HardConcreteGate needs l < 0 < 1 < r, got l={l}, r={r}")
        if beta <= 0:
            raise ValueError(f"HardConcreteGate needs beta > 0, got {beta}")
        self.layers, self.heads = layers, heads
        self.beta, self.l, self.r = beta, l, r
        self.eval_keep_expected = eval_keep_expected
        self.log_alpha = nn.Parameter(torch.empty(layers, heads).uniform_(init_mean - init_range, init_mean + init_range))

    def extra_repr(self) -> str:
        return f"layers={self.layers}, heads={self.heads}, beta={self.beta}, l={self.l}, r={self.r}"

    # The gate statistics are fp32 even when called inside an autocast region (the encoder samples
    # the gates inside its forward pass): autocast is off in these methods.
    @fp32
    def forward(self) -> torch.Tensor:
        """Gate values ``[layers, heads]``: a sample when training, deterministic in eval."""
        if not self.training:
            return self._deterministic()
        u = torch.rand_like(self.log_alpha).clamp(self.EPS, 1.0 - self.EPS)
        s = torch.sigmoid((torch.log(u) - torch.log1p(-u) + self.log_alpha) / self.beta)
        return (s * (self.r - self.l) + self.l).clamp(0.0, 1.0)

    @fp32
    def _deterministic(self) -> torch.Tensor:
        gates = deterministic_gate(self.log_alpha, self.l, self.r)  # [layers, heads]
        if not self.eval_keep_expected:
            return gates
        keep = int(self.expected_l0().sum().round().item())
        order = self.log_alpha.flatten().argsort(descending=True)
        top = torch.zeros(gates.numel(), dtype=torch.bool, device=gates.device)
        top[order[:keep]] = True
        return gates * top.view_as(gates)

    @fp32
    def expected_l0(self) -> torch.Tensor:
        """P(gate != 0) per head ``[layers, heads]``: ``sigmoid(log_alpha - beta * log(-l / r))``."""
        return torch.sigmoid(self.log_alpha - self.beta * math.log(-self.l / self.r))

    @fp32
    def penalty(self) -> torch.Tensor:
        """Expected number of open heads: sum over heads, averaged over layers (scalar)."""
        return self.expected_l0().sum(-1).mean()

    def values(self) -> torch.Tensor:
        """Deterministic (eval) gate values ``[layers, heads]``, detached."""
        return self._deterministic().detach()


class FixedGate(nn.Module):
    """Fixed gates: a hard 0/1 mask or soft values in [0, 1], not learnt.

    Args:
        mask: ``[layers, heads]`` tensor (or nested list); stored as a float buffer.
    """

    def __init__(self, mask: torch.Tensor):
        super().__init__()
        mask = torch.as_tensor(mask, dtype=torch.get_default_dtype())
        if mask.dim() != 2:
            raise GateMaskError(f"FixedGate needs a [layers, heads] mask, got shape {tuple(mask.shape)}")
        if not torch.isfinite(mask).all() or mask.min() < 0 or mask.max() > 1:
            raise GateMaskError(
                f"FixedGate values must lie in [0, 1], got min {mask.min().item()}, max {mask.max().item()}"
            )
        self.register_buffer("mask", mask.clone())

    def extra_repr(self) -> str:
        return f"layers={self.mask.shape[0]}, heads={self.mask.shape[1]}"

    def forward(self) -> torch.Tensor:
        return self.mask

    def penalty(self) -> torch.Tensor:
        return self.mask.new_zeros(())

    def values(self) -> torch.Tensor:
        return self.mask.detach().clone()


class MaskedGate(nn.Module):
    """A gate multiplied by a mask: ``forward() = base() * mask`` (see ``GatedEncoder.mask_heads``).

    Args:
        base: the encoder's gate module, or None for an encoder without gates (values 1).
        mask: ``[layers, heads]`` tensor.
    """

    def __init__(self, base: nn.Module | None, mask: torch.Tensor):
        super().__init__()
        self.base = base
        self.mask = mask

    def forward(self) -> torch.Tensor:
        values = self.base() if self.base is not None else torch.ones_like(self.mask)  # [layers, heads]
        return values * self.mask

    def penalty(self) -> torch.Tensor:
        return self.base.penalty() if self.base is not None else self.mask.new_zeros(())

    def values(self) -> torch.Tensor:
        base = self.base.values() if self.base is not None else torch.ones_like(self.mask)
        return (base * self.mask).detach()


def expand_groups(values: torch.Tensor, group_size: int) -> torch.Tensor:
    """``[layers, groups]`` -> ``[layers, groups * group_size]``: each group's value for each of its query heads."""
    return values.repeat_interleave(group_size, dim=-1)


class GroupedGate(nn.Module):
    """One learnt gate per key/value group, shared by the group's query heads (grouped-query attention).

    Args:
        base: a learnt gate on the ``[layers, groups]`` grid (a :class:`HardConcreteGate`), with
            ``groups = heads // group_size`` (the model's KV heads).
        group_size: query heads per group (``n_rep = heads // kv_heads``); query head ``h`` is in group
            ``h // group_size``.

    ``forward()`` and ``values()`` give ``[layers, heads]``: the group's value repeated for each of its
    query heads. ``expected_l0()`` does the same, so its sum counts QUERY heads: a group's probability
    of staying open counts ``group_size`` times, in the L0 penalty and in a head budget alike, because
    closing the group removes that many query heads (and one K/V pair).
    """

    def __init__(self, base: nn.Module, group_size: int):
        super().__init__()
        if group_size < 1:
            raise ValueError(f"GroupedGate needs group_size >= 1, got {group_size}")
        if not hasattr(base, "expected_l0"):
            raise ValueError(f"GroupedGate needs a learnt gate (with expected_l0), got {type(base).__name__}")
        self.base = base
        self.group_size = group_size

    def extra_repr(self) -> str:
        return f"group_size={self.group_size}"

    def forward(self) -> torch.Tensor:
        return expand_groups(self.base(), self.group_size)  # [layers, heads]

    def expected_l0(self) -> torch.Tensor:
        """P(gate != 0) per query head ``[layers, heads]`` (each group's value ``group_size`` times)."""
        return expand_groups(self.base.expected_l0(), self.group_size)

    def penalty(self) -> torch.Tensor:
        """Expected number of open QUERY heads: sum over heads, averaged over layers (scalar);
        ``group_size`` times the base gate's penalty."""
        return self.expected_l0().sum(-1).mean()

    def values(self) -> torch.Tensor:
        return expand_groups(self.base.values(), self.group_size)  # [layers, heads]


def _grouped_mask(mask, layers: int, heads: int, group_size: int) -> torch.Tensor:
    """A fixed mask for ``group_size`` query heads per group as a ``[layers, heads]`` grid.

    ``mask`` is ``[layers, heads // group_size]`` (one value per group, expanded) or ``[layers, heads]``
    (a query-head grid, e.g. a run's gates.json), which must then hold one value per group."""
    mask = torch.as_tensor(mask, dtype=torch.get_default_dtype())
    groups = heads // group_size
    if mask.dim() == 2 and tuple(mask.shape) == (layers, groups):
        return expand_groups(mask, group_size)
    if mask.dim() == 2 and tuple(mask.shape) == (layers, heads):
        spread = mask.view(layers, groups, group_size)  # [layers, groups, n_rep]
        if not torch.equal(spread, spread[..., :1].expand_as(spread)):
            raise GateMaskError(f"FixedGate mask ({layers}, {heads}) gives the query heads of one KV group different "
                             f"values; with gates per KV group ({group_size} query heads each) give one value per "
                             f"group, a ({layers}, {groups}) grid")
        return mask
    raise GateMaskError(f"FixedGate mask has shape {tuple(mask.shape)}, the encoder needs ({layers}, {groups}) "
                     f"(one per KV group) or ({layers}, {heads}) (one per query head, equal within a group)")


# kind -> class; "none" builds no gate, so the encoder installs no hook at all.
GATES: dict[str, type[nn.Module] | None] = {
    "none": None,
    "fixed": FixedGate,
    "hard_concrete": HardConcreteGate,
}


def build_gate(kind: str, layers: int, heads: int, group_size: int = 1, **kwargs) -> nn.Module | None:
    """Build a gate of ``kind`` (a key of ``GATES``) for a ``[layers, heads]`` grid.

    ``"fixed"`` takes ``mask=`` (checked against the grid); ``"hard_concrete"`` takes the
    ``HardConcreteGate`` hyper-parameters; ``"none"`` returns ``None``.
    ``group_size``: query heads that share one gate (``heads // kv_heads`` for gates per KV group,
    ``encoder.gate_groups=kv``). Default 1: one gate per head. With more, a learnt gate is a
    :class:`GroupedGate` and a fixed mask may be given per group (``[layers, heads // group_size]``).
    """
    if kind not in GATES:
        raise ValueError(f"unknown gate kind {kind!r}; valid kinds: {sorted(GATES)}")
    if group_size < 1 or heads % group_size:
        raise ValueError(f"group_size {group_size} does not divide the {heads} heads")
    cls = GATES[kind]
    if cls is None:
        return None
    if cls is FixedGate:
        if "mask" not in kwargs:
            raise ValueError("gate 'fixed' needs mask=[layers, heads] values in [0, 1]")
        mask = kwargs.pop("mask")
        gate = FixedGate(_grouped_mask(mask, layers, heads, group_size) if group_size > 1 else mask)
        if kwargs:
            raise TypeError(f"gate 'fixed' got unexpected arguments {sorted(kwargs)}")
        if tuple(gate.mask.shape) != (layers, heads):
            raise GateMaskError(
                f"FixedGate mask has shape {tuple(gate.mask.shape)}, the encoder needs ({layers}, {heads})"
            )
        return gate
    if group_size > 1:
        return GroupedGate(cls(layers, heads // group_size, **kwargs), group_size)
    return cls(layers, heads, **kwargs)

