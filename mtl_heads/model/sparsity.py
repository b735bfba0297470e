"""The sparsity objective that drives head pruning: a fixed L0 weight (lambda) or a head budget.

Two ways to ask for sparse gates (``prune.*`` in ``configs/train.yaml``):

- ``prune.lambda``: loss += lambda * (expected number of open heads per layer, averaged over
  layers), the reference objective (Voita et al. 2019; He & Choi 2021). ``auto`` takes the
  reference scripts' per-task values (``LAMBDA_DEFAULTS``; 0.001 for any multi-task run).
- ``prune.budget``: a target number (int) or fraction (float in (0, 1)) of heads kept, reached
  by a Lagrangian controller on the expected L0 (Wang et al. 2020, "Structured pruning of large
  language models"; Xia et al. 2022, CoFi):
  ``loss += l1 * (E - t) + l2 * (E - t)^2`` with ``E`` the expected fraction of open heads and
  ``t`` the target fraction; the multipliers ``l1, l2`` are *maximised* (gradient ascent) while
  everything else minimises, so the pressure grows until the gates meet the budget, whatever the
  task's loss scale. That makes runs of different tasks comparable at equal sparsity.

Both count QUERY heads. With one gate per key/value group (``encoder.gate_groups=kv``, a
``GroupedGate``), a gate stands for the ``group_size`` query heads it closes together: its expected L0
counts ``group_size`` times in the penalty and in the budget's expected count, and a budget is a
whole number of groups (a count must be a multiple of ``group_size``; a fraction is rounded to one).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from mtl_heads.config import PRUNE_MODES, ConfigError
from mtl_heads.model.precision import fp32

__all__ = ["LAMBDA_DEFAULTS", "MTL_LAMBDA", "LR_LAGRANGIAN", "INIT_GATES", "LagrangianBudget", "resolve_lambda",
           "resolve_budget", "Pruning", "Sparsity", "sparsity_of", "PRUNE_MODES", "prune_mode", "budget_gap", "budget_line",
           "nothing_pruned_line"]

# task -> L0 weight used by He & Choi (2021)'s reference scripts for head pruning
LAMBDA_DEFAULTS: dict[str, float] = {"pos": 0.01, "dep": 0.01, "con": 0.01, "srl": 0.001, "ner": 0.0002}
MTL_LAMBDA = 0.001  # the reference value for five-task MTL, used for any multi-task run
LR_LAGRANGIAN = 0.01  # prune.lr_lagrangian of configs/train.yaml, for a config saved without the key
INIT_GATES = ("fresh", "init")  # prune.init_gates: new gates on init='s weights, or init's learnt gates


def prune_mode(cfg) -> str:
    """``prune.mode`` of a run config: none | dynamic | static (``none`` for runs saved before
    pruning existed); anything else is a ConfigError naming the key (the one place it is checked
    after loading: a config built in code skips the key rules of ``mtl_heads.config``).

    A training run reads it once, in :meth:`Pruning.from_config`; what reads it besides is a config with no
    run under way: a run folder's name before the run starts, and the W&B layout of a saved run's config."""
    from omegaconf import OmegaConf

    mode = OmegaConf.select(cfg, "prune.mode", default="none") or "none"
    if mode not in PRUNE_MODES:
        raise ConfigError(f"config key 'prune.mode': expected one of {', '.join(PRUNE_MODES)}, got {mode!r}")
    return mode


@dataclass(frozen=True)
class Pruning:
    """What a run's ``prune`` section asks for, resolved once, when the run starts (:meth:`from_config`);
    training reads this instead of the config. The defaults are a run that prunes nothing."""

    mode: str = "none"
    """``prune.mode``: ``none`` (default: no sparsity pressure, the gates train as they are), ``dynamic`` (gates,
    encoder and decoders learnt together) or ``static`` (gates learnt on the trained run given by ``init=``)."""
    weight: float = 0.0
    """The L0 weight lambda: ``prune.lambda`` with ``auto`` resolved by :func:`resolve_lambda` (default 0.0;
    0.0 when not pruning). Not used with a :attr:`budget`."""
    budget: int | float | None = None
    """``prune.budget`` as given: a head count, or a fraction in (0, 1) of the heads (default None: the L0
    weight instead; None when not pruning). :func:`sparsity_of` turns it into query heads once the encoder
    is built (:func:`resolve_budget`)."""
    lr_lagrangian: float = LR_LAGRANGIAN
    """``prune.lr_lagrangian``: the step size of the budget controller's multipliers (default 0.01)."""
    freeze_encoder: bool = False
    """``prune.freeze_encoder``: static pruning freezes the encoder too, so that only the gates learn
    (default False; False when not static)."""
    init_gates: str = "fresh"
    """``prune.init_gates``: with ``init=``, ``fresh`` (default: new gates on the init run's weights, as static
    pruning starts) or ``init`` (the init run's learnt gates, trained on). Only a pruning run reads it."""

    @property
    def active(self) -> bool:
        """Whether the run prunes (``mode`` is not ``none``)."""
        return self.mode != "none"

    @classmethod
    def from_config(cls, cfg) -> "Pruning":
        """The ``prune`` section of the run config ``cfg`` (whose ``tasks`` give ``lambda: auto`` its value and
        whose ``init`` static pruning needs) resolved and checked; a bad value is a ConfigError naming its key.
        A config without the section (saved before pruning existed) is a run that prunes nothing; a key missing
        from it takes ``configs/train.yaml``'s default."""
        from omegaconf import OmegaConf

        mode = prune_mode(cfg)
        init = OmegaConf.select(cfg, "init", default=None)
        init_gates = str(OmegaConf.select(cfg, "prune.init_gates", default=None) or "fresh")
        if init_gates not in INIT_GATES:
            raise ConfigError(f"config key 'prune.init_gates': expected fresh or init, got {init_gates!r}")
        if init_gates == "init" and not init:
            raise ConfigError("config key 'prune.init_gates': init takes the gates of the run given by init=, "
                              "and no init= is set")
        if mode == "static" and not init:
            raise ConfigError("config key 'init': static pruning learns gates on a trained run; "
                              "pass init=runs/<trained run>")
        if mode == "none":
            return cls(init_gates=init_gates)
        weight = resolve_lambda(OmegaConf.select(cfg, "prune.lambda", default="auto"), list(cfg.tasks))
        return cls(mode=mode, weight=weight, budget=OmegaConf.select(cfg, "prune.budget", default=None),
                   lr_lagrangian=OmegaConf.select(cfg, "prune.lr_lagrangian", default=LR_LAGRANGIAN),
                   freeze_encoder=mode == "static" and bool(OmegaConf.select(cfg, "prune.freeze_encoder", default=False)),
                   init_gates=init_gates)


def resolve_lambda(value, tasks: list[str]) -> float:
    """``prune.lambda``: a number, or ``auto`` for the per-task reference value (tasks without
    one get 0.001)."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return LAMBDA_DEFAULTS.get(tasks[0], MTL_LAMBDA) if len(tasks) == 1 else MTL_LAMBDA
    try:
        weight = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"config key 'prune.lambda': expected a number or auto, got {value!r}") from None
    if weight < 0:
        raise ConfigError(f"config key 'prune.lambda': must be >= 0, got {weight}")
    return weight


def resolve_budget(value, n_heads: int, group_size: int = 1) -> int | None:
    """``prune.budget`` as a (query) head count: an int in [1, n_heads], or a fraction in (0, 1).

    Args:
        value: the config value (None: no budget).
        n_heads: query heads in the encoder (layers x heads).
        group_size: query heads closed together by one gate (``encoder.gate_groups=kv``). Default 1.
            A count must then be a multiple of it; a fraction is rounded to the nearest multiple (at
            least one group).
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"config key 'prune.budget': expected a head count or a fraction in (0, 1), got {value!r}")
    if isinstance(value, float) and 0 < value < 1:
        return group_size * max(1, round(value * n_heads / group_size))
    if float(value).is_integer() and 1 <= value <= n_heads:
        if value % group_size:
            below, above = int(value) // group_size * group_size, (int(value) // group_size + 1) * group_size
            near = f"{below} or {above}" if below and above <= n_heads else str(below or above)
            raise ConfigError(f"config key 'prune.budget': {int(value)} query heads is not a whole number of KV groups "
                              f"(encoder.gate_groups=kv: one gate closes {group_size} query heads); use {near}")
        return int(value)
    raise ConfigError(f"config key 'prune.budget': {value} is neither a fraction in (0, 1) nor a head count "
                      f"in 1..{n_heads} (this encoder has {n_heads} heads)")


class LagrangianBudget(nn.Module):
    """Lagrangian penalty pulling the expected number of open heads to ``target``.

    Args:
        target: heads to keep (count of query heads).
        total: query heads in the encoder.

    ``forward(expected_l0 [layers, heads]) -> scalar``; ``expected_l0`` per query head (a
    ``GroupedGate`` repeats each group's value for its query heads, so the sum counts query heads).
    The multipliers are parameters whose gradient is negated by a hook, so a normal (descending)
    optimiser step *raises* the penalty's weight while the gates are off target: gradient ascent on
    the multipliers.
    """

    def __init__(self, target: int, total: int):
        super().__init__()
        self.target, self.total = target, total
        self.lambda_1 = nn.Parameter(torch.zeros(()))
        self.lambda_2 = nn.Parameter(torch.zeros(()))
        for p in (self.lambda_1, self.lambda_2):
            p.register_hook(torch.neg)

    def gap(self, expected_l0: torch.Tensor) -> torch.Tensor:
        """Expected minus target fraction of open heads (scalar)."""
        return (expected_l0.sum() - self.target) / self.total

    @fp32
    def forward(self, expected_l0: torch.Tensor) -> torch.Tensor:
        gap = self.gap(expected_l0)
        return self.lambda_1 * gap + self.lambda_2 * gap * gap


class Sparsity:
    """The sparsity term added to every task loss during pruning (nothing when not pruning).

    Args:
        gate: the encoder's gate module (needs ``penalty()`` and ``expected_l0()`` when active).
        mode: ``none`` | ``dynamic`` | ``static`` (``prune.mode``).
        weight: the L0 weight lambda (ignored when a budget is set).
        budget: target heads kept, or None.
    """

    def __init__(self, gate: nn.Module | None, mode: str, weight: float = 0.0, budget: int | None = None):
        self.gate, self.mode, self.weight = gate, mode, weight
        self.controller = None
        if mode == "none":
            return
        if gate is None or not hasattr(gate, "expected_l0"):
            raise ConfigError(f"config key 'prune.mode': pruning ({mode}) needs learnt gates, "
                              f"set encoder.gate=hard_concrete (it is {type(gate).__name__ if gate else 'none'})")
        if budget is not None:
            expected = gate.expected_l0()  # [layers, heads], per query head
            self.controller = LagrangianBudget(budget, expected.numel()).to(expected.device)

    @property
    def active(self) -> bool:
        return self.mode != "none"

    def parameters(self) -> list[nn.Parameter]:
        """The Lagrange multipliers (empty without a budget)."""
        return list(self.controller.parameters()) if self.controller is not None else []

    @fp32  # the L0 penalty is fp32 even if called inside an autocast region
    def term(self) -> torch.Tensor | None:
        """The scalar to add to the task loss, or None when not pruning."""
        if not self.active:
            return None
        if self.controller is not None:
            return self.controller(self.gate.expected_l0())
        return self.weight * self.gate.penalty() if self.weight else None

    def expected_heads(self) -> float:
        return float(self.gate.expected_l0().detach().sum()) if self.active else float("nan")

    def state_dict(self) -> dict:
        return self.controller.state_dict() if self.controller is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if self.controller is not None and state:
            self.controller.load_state_dict(state)


def sparsity_of(pruning: Pruning, gate: nn.Module | None) -> Sparsity:
    """The run's :class:`Sparsity`: ``pruning`` (:meth:`Pruning.from_config`) on the encoder's ``gate``, whose
    head count turns a budget into query heads (:func:`resolve_budget`)."""
    if not pruning.active:
        return Sparsity(gate, pruning.mode)
    n_heads = gate.expected_l0().numel() if gate is not None and hasattr(gate, "expected_l0") else 0
    budget = resolve_budget(pruning.budget, n_heads, getattr(gate, "group_size", 1)) if n_heads else None
    return Sparsity(gate, pruning.mode, pruning.weight, budget)


# --- how far a run ended from its budget ----------------------------------------------------------
def budget_gap(target: int, kept: int) -> dict[str, int]:
    """``{"target", "kept", "gap"}`` of a budget run (``metrics.json``'s ``budget``): the heads asked for,
    the heads its model keeps, and ``kept - target`` (> 0: more heads than the budget; 0: met)."""
    return {"target": int(target), "kept": int(kept), "gap": int(kept) - int(target)}


def budget_line(gap: dict[str, int], kept_per_epoch: list[int], cfg) -> str:
    """One line for the end of a budget run: how far the kept count is from the budget and what closes
    the gap, naming the run's own values of the keys that do.

    The budget is met in expectation by the Lagrangian controller (:class:`LagrangianBudget`): its
    multipliers move by Adam steps of size ``prune.lr_lagrangian``, up while the expected count is
    above the target and down while below, and the gates follow at ``train.lr_gate``. A budget run
    keeps ``round(expected count)`` heads (``eval_keep_expected`` of the gate), so a gap at the end is
    a controller that has not settled: the gates were still closing (every epoch on the same side of
    the budget), or the count swings around it (an epoch on the other side). Either way more steps
    settle it; a slow approach also closes sooner with a larger multiplier step or gate rate.

    Args:
        gap: :func:`budget_gap`'s record.
        kept_per_epoch: heads kept at the end of each epoch (the history's ``heads_kept``).
        cfg: the run config (its ``train.epochs``, ``train.lr_gate`` and ``prune.lr_lagrangian`` are named).
    """
    from omegaconf import OmegaConf

    target, kept, off = gap["target"], gap["kept"], gap["gap"]
    epochs, lr_lagrangian, lr_gate = (OmegaConf.select(cfg, key) for key in
                                      ("train.epochs", "prune.lr_lagrangian", "train.lr_gate"))
    head = f"budget {target} heads: {kept} kept"
    per_epoch = ", ".join(str(k) for k in kept_per_epoch)
    if off == 0:
        return f"{head}, the budget is met (per epoch: {per_epoch})"
    head += f", {abs(off)} {'over' if off > 0 else 'under'} (per epoch: {per_epoch})"
    steps = f"more epochs (train.epochs, now {epochs}) or more training sentences"
    if any((k - target) * off < 0 for k in kept_per_epoch):  # an epoch on the other side of the budget
        return (f"{head}: the count still swings around the budget; the controller settles with {steps} "
                f"(the step size of its multipliers: prune.lr_lagrangian, now {lr_lagrangian})")
    return (f"{head}: the gates were still {'closing' if off > 0 else 'opening'} when training ended; what closes "
            f"the gap: {steps}, a larger prune.lr_lagrangian (now {lr_lagrangian}: how fast the budget's pull grows) "
            f"or train.lr_gate (now {lr_gate}: how fast the gates follow)")


def nothing_pruned_line(weight: float, heads: int, cfg) -> str:
    """One line for the end of a pruning run with an L0 weight (no budget) that kept every head: why (the
    weight's pull did not close a gate in the steps it had) and what to change, naming the run's own values.

    Args:
        weight: the L0 weight lambda the run used (:func:`resolve_lambda` of ``prune.lambda``).
        heads: the heads of the encoder, all kept.
        cfg: the run config (its ``prune.lambda``, ``train.epochs`` and ``train.lr_gate`` are named).
    """
    from omegaconf import OmegaConf

    given, epochs, lr_gate = (OmegaConf.select(cfg, key) for key in ("prune.lambda", "train.epochs", "train.lr_gate"))
    source = " (auto: the reference value for these tasks)" if str(given).strip().lower() == "auto" else ""
    return (f"no head pruned ({heads}/{heads} kept): the L0 weight prune.lambda={weight:g}{source} closed no gate in "
            f"{epochs} epoch(s); to prune, raise prune.lambda (e.g. {weight * 10 if weight else MTL_LAMBDA:g}), train "
            f"longer (train.epochs, now {epochs}) or let the gates move faster (train.lr_gate, now {lr_gate}), or ask for a head count with "
            f"prune.budget (e.g. prune.budget={max(heads // 2, 1)})")
