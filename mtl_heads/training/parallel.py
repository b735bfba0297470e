"""How the model is spread over the processes of a distributed launch: ``train.strategy``.

- ``ddp`` (default): every process holds the whole model, its gradients and its AdamW moments;
  DistributedDataParallel averages the gradients during backward (:class:`Replicated`; one
  process: the model as it is).
- ``fsdp``: PyTorch's FSDP2 (``torch.distributed.fsdp.fully_shard``) shards the ENCODER over the
  processes (:class:`Sharded`): each transformer layer is one group, the rest of the encoder
  (embeddings, final norm) the root group. A process keeps 1/N of the encoder's fp32 weights,
  gradients and AdamW moments, and gathers one layer at a time for its forward and backward.
  Under bf16 (``precision``) the gathered copies are bf16 and the gradients are reduced in fp32
  (``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)``); the shards stay fp32.

Under ``fsdp`` the gates, the learnt DEP root vector and the task decoders are NOT sharded: they
stay plain fp32 tensors, whole on every process, and :meth:`Sharded.sync_grads` averages their
gradients after backward, as DDP would. They are small (a 7B decoder has 32 x 32 gates and
decoders of a few million weights, under 1% of the model), and they are read outside a forward
pass (the L0 penalty, gate values for logs, ``gates.json`` and pruning), which a sharded tensor
could not serve without a gather; plain tensors keep that code the same for both strategies.

Checkpoints are the same files whichever strategy wrote them: rank 0 writes the FULL state
(gathered with ``torch.distributed.checkpoint.state_dict``, ``full_state_dict=True,
cpu_offload=True``) as ``model.safetensors`` and ``state.pt`` with the optimiser state keyed by
parameter index, as ``Optimizer.state_dict()`` writes it. A run trained with FSDP is therefore
loaded by predict/evaluate/probe without FSDP, and resumed with either strategy.

Example::

    parallel = make_parallel("fsdp", rank, world, device, bf16=False)
    wrapped = parallel.wrap(model)       # shards in place and moves to device; returns the module to call
    loss.backward(); parallel.sync_grads(model); parallel.clip_grad_norm(params, 5.0)
"""
from __future__ import annotations

from itertools import chain

import torch
from torch import nn

from mtl_heads.config import ConfigError

__all__ = ["STRATEGIES", "Replicated", "Sharded", "make_parallel", "check_strategy", "training_bytes"]

STRATEGIES = ("ddp", "fsdp")


def check_strategy(strategy: str, world: int) -> None:
    """A ConfigError naming ``train.strategy`` when ``strategy`` cannot run with ``world`` processes.

    ``fsdp`` needs a distributed launch with at least two processes: one process would hold the
    whole model anyway, so single-process FSDP is refused rather than run as a slower copy of
    ``ddp`` (a resumed FSDP run may continue with ``train.strategy=ddp``: the checkpoint is the same).
    """
    if strategy not in STRATEGIES:
        raise ConfigError(f"config key 'train.strategy': expected one of {', '.join(STRATEGIES)}, got {strategy!r}")
    if strategy != "fsdp":
        return
    if world < 2:
        raise ConfigError("config key 'train.strategy': fsdp shards the model over the processes of a distributed "
                          "launch, and this run has one process; launch it with `torchrun --nproc_per_node=N -m "
                          "mtl_heads.train ...` (N >= 2) or use train.strategy=ddp")
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError:
        raise ConfigError(f"config key 'train.strategy': fsdp needs torch.distributed.fsdp.fully_shard (FSDP2), "
                          f"which torch {torch.__version__} lacks; use train.strategy=ddp") from None


def make_parallel(strategy: str, rank: int = 0, world: int = 1, device: torch.device | str = "cpu",
                  bf16: bool = False) -> "Replicated":
    """The :class:`Replicated` (``ddp``) or :class:`Sharded` (``fsdp``) strategy.

    Args:
        strategy: ``ddp`` or ``fsdp`` (checked with :func:`check_strategy`).
        rank, world: this process and the number of processes (default 0, 1: no launch).
        device: where the model trains (default cpu).
        bf16: the run uses bf16 (``mtl_heads.model.precision.uses_bf16``); FSDP then gathers bf16 copies.
    """
    check_strategy(strategy, world)
    cls = Sharded if strategy == "fsdp" else Replicated
    return cls(rank, world, torch.device(device), bf16)


class Replicated:
    """``ddp``: a whole model per process (DistributedDataParallel when ``world > 1``).

    Args:
        rank, world: this process and the number of processes (default 0, 1).
        device: where the model trains (default cpu).
        bf16: unused here (autocast does the casting); kept for one constructor signature.
    """

    name = "ddp"
    sharded = False  # True: a forward pass needs every process (evaluation runs on all of them)

    def __init__(self, rank: int = 0, world: int = 1, device: torch.device = torch.device("cpu"), bf16: bool = False):
        self.rank, self.world, self.device, self.bf16 = rank, world, torch.device(device), bf16

    def wrap(self, model: nn.Module) -> nn.Module:
        """Move ``model`` to the device; the module to call for training steps (the DDP wrapper
        under a launch; the parameters stay ``model``'s)."""
        model.to(self.device)
        if self.world == 1:
            return model
        ids = [self.device.index] if self.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=ids, find_unused_parameters=True)

    def sync_grads(self, model: nn.Module) -> None:
        """Nothing: DDP averages the gradients during backward."""

    def clip_grad_norm(self, params: list[nn.Parameter], max_norm: float) -> torch.Tensor:
        """``torch.nn.utils.clip_grad_norm_``; returns the norm before clipping."""
        return nn.utils.clip_grad_norm_(params, max_norm)

    def model_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The full state dict for rank 0 to write (``{}`` on the other ranks: they write nothing)."""
        return model.state_dict() if self.rank == 0 else {}

    def load_model_state(self, model: nn.Module, state: dict[str, torch.Tensor]) -> None:
        """Load a full state dict (every rank reads the file itself)."""
        model.load_state_dict(state)

    def optimizer_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
        """``optimizer.state_dict()`` (``{}`` on ranks other than 0)."""
        return optimizer.state_dict() if self.rank == 0 else {}

    def load_optimizer_state(self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict | None) -> None:
        """``optimizer.load_state_dict(state)`` (every rank reads the file itself)."""
        optimizer.load_state_dict(state)


class Sharded(Replicated):
    """``fsdp``: the encoder sharded with FSDP2, one group per transformer layer plus the root
    (the rest of the encoder); gates, root vector and decoders replicated (see the module doc).

    Checkpoints: :meth:`model_state` and :meth:`optimizer_state` are collectives (every rank calls
    them; rank 0 gets the full CPU state, the others ``{}``); the loaders take the full state on
    rank 0 and ``{}`` or None elsewhere and broadcast it (``broadcast_from_rank0``), so that only
    rank 0 ever holds a whole copy in memory.
    """

    name = "fsdp"
    sharded = True

    def wrap(self, model: nn.Module) -> nn.Module:
        """Shard ``model.encoder`` in place, then move the rest to the device. The model is sharded
        before it is moved, so a model larger than one GPU goes there one layer at a time."""
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh(self.device.type, (self.world,))
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if self.bf16 else None,
                                      reduce_dtype=torch.float32)
        encoder = model.encoder
        for layer in encoder.layers:  # the o_proj pre-hooks (gates) sit inside; they stay registered
            fully_shard(layer, mesh=mesh, mp_policy=policy)
        fully_shard(encoder.model, mesh=mesh, mp_policy=policy)
        model.to(self.device)  # gates, root vector, decoders (FSDP modules are already there)
        return model

    def replicated(self, model: nn.Module) -> list[nn.Parameter]:
        """The trainable parameters FSDP does not manage (gates, root vector, decoders)."""
        from torch.distributed.tensor import DTensor

        return [p for p in model.parameters() if p.requires_grad and not isinstance(p, DTensor)]

    @torch.no_grad()
    def sync_grads(self, model: nn.Module) -> None:
        """Average the replicated parameters' gradients over the processes (FSDP reduces its own
        during backward). As DDP with ``find_unused_parameters``: a parameter with a gradient on
        some processes only counts zeros for the others; one with none anywhere keeps None."""
        import torch.distributed as dist

        params = self.replicated(model)
        if not params:
            return
        has = torch.tensor([float(p.grad is not None) for p in params], device=params[0].device)  # [n]
        dist.all_reduce(has)
        used = [p for p, n in zip(params, has.tolist()) if n > 0]
        for p in used:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        for dtype in sorted({p.grad.dtype for p in used}, key=str):  # the same order on every process
            grads = [p.grad for p in used if p.grad.dtype == dtype]
            flat = torch._utils._flatten_dense_tensors(grads)  # one collective for all of them
            dist.all_reduce(flat)
            flat.div_(self.world)
            for grad, synced in zip(grads, torch._utils._unflatten_dense_tensors(flat, grads)):
                grad.copy_(synced)

    @torch.no_grad()
    def clip_grad_norm(self, params: list[nn.Parameter], max_norm: float) -> torch.Tensor:
        """``clip_grad_norm_`` over sharded and replicated gradients together: the squared norms of
        the local shards are summed over the processes, the replicated ones (equal everywhere after
        :meth:`sync_grads`) added once. Returns the total norm before clipping."""
        import torch.distributed as dist
        from torch.distributed.tensor import DTensor

        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return torch.zeros((), device=self.device)
        sharded = [g.to_local() for g in grads if isinstance(g, DTensor)]
        plain = [g for g in grads if not isinstance(g, DTensor)]
        squares = torch.zeros((), dtype=torch.float32, device=self.device)
        for g in sharded:
            squares += g.detach().float().pow(2).sum()
        dist.all_reduce(squares)
        for g in plain:
            squares += g.detach().float().pow(2).sum()
        total = squares.sqrt()
        scale = (max_norm / (total + 1e-6)).clamp(max=1.0)  # as torch.nn.utils.clip_grad_norm_
        for g in sharded + plain:
            g.mul_(scale.to(g.dtype))
        return total

    @staticmethod
    def _options(**kwargs):
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        return StateDictOptions(full_state_dict=True, **kwargs)

    def model_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The full state dict on rank 0 (CPU), ``{}`` elsewhere. A collective: every rank calls it."""
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return get_model_state_dict(model, options=self._options(cpu_offload=True))

    def load_model_state(self, model: nn.Module, state: dict[str, torch.Tensor] | None) -> None:
        """Load the full state dict that rank 0 holds (the others pass ``{}`` or None) into the
        shards of every rank. A collective. Check the keys and shapes first (:meth:`misfit`):
        a rank that fails in the middle of a broadcast leaves the others waiting."""
        from torch.distributed.checkpoint.state_dict import set_model_state_dict

        set_model_state_dict(model, state if self.rank == 0 else {}, options=self._options(broadcast_from_rank0=True))

    def optimizer_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
        """The full optimiser state on rank 0 in ``Optimizer.state_dict()``'s layout (parameters
        numbered in ``param_groups`` order), ``{}`` elsewhere. A collective."""
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        # DCP gives an optimiser that never stepped a state by stepping it with lr 0; that would
        # change its step counts, and there is nothing to gather anyway
        if not optimizer.state:
            return optimizer.state_dict() if self.rank == 0 else {}
        by_name = get_optimizer_state_dict(model, optimizer, options=self._options(cpu_offload=True))
        return _by_index(by_name) if self.rank == 0 else {}

    def load_optimizer_state(self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict | None) -> None:
        """Load the optimiser state that rank 0 holds (``Optimizer.state_dict()`` layout; None or
        ``{}`` on the others) into every rank's shards. A collective."""
        import torch.distributed as dist
        from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

        box = [sorted((state or {}).get("state", {})) if self.rank == 0 else None]  # parameters with a state
        dist.broadcast_object_list(box, src=0)
        saved = set(box[0])
        if not saved:  # saved before its first step: nothing but the groups' settings
            plain = [state] if self.rank == 0 else [None]
            dist.broadcast_object_list(plain, src=0)
            optimizer.load_state_dict(plain[0])
            return
        by_name = _by_name(state, model, optimizer) if self.rank == 0 else {}
        # strict=False: a parameter that never had a gradient (the DEP root vector in a POS run)
        # has no state, which optimizer.load_state_dict accepts
        set_optimizer_state_dict(model, optimizer, by_name,
                                 options=self._options(broadcast_from_rank0=True, strict=False))
        # DCP first gives every parameter a state (a step with lr 0); drop those the checkpoint has
        # none for, as load_state_dict would, so that their first real step starts fresh moments
        params = chain.from_iterable(g["params"] for g in optimizer.param_groups)
        for index, param in enumerate(params):
            if index not in saved:
                optimizer.state.pop(param, None)

    @staticmethod
    def misfit(model: nn.Module, optimizer: torch.optim.Optimizer | None, weights: dict, optim_state: dict | None
               ) -> str | None:
        """What keeps a full checkpoint from loading into ``model`` (sharded or not) and
        ``optimizer``: a missing, unexpected or wrong-shaped weight, or other parameter groups;
        None when it fits. Shapes are compared with the global shapes of the shards."""
        own = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        missing, unexpected = sorted(set(own) - set(weights)), sorted(set(weights) - set(own))
        if missing or unexpected:
            return (f"missing weights {', '.join(missing[:3])}" if missing else
                    f"unexpected weights {', '.join(unexpected[:3])}")
        bad = [k for k, v in weights.items() if tuple(v.shape) != own[k]]
        if bad:
            return f"weight {bad[0]} has shape {tuple(weights[bad[0]].shape)}, the model needs {own[bad[0]]}"
        if optimizer is not None:
            groups = (optim_state or {}).get("param_groups", [])
            sizes = [len(g["params"]) for g in groups]
            if sizes != [len(g["params"]) for g in optimizer.param_groups]:
                return f"the optimiser state has parameter groups of sizes {sizes}, the model's optimiser " \
                       f"{[len(g['params']) for g in optimizer.param_groups]}"
        return None


def _by_index(state: dict) -> dict:
    """A DCP optimiser state keyed by parameter names -> ``Optimizer.state_dict()``'s layout, the
    parameters numbered in ``param_groups`` order (DCP keeps that order)."""
    number: dict[str, int] = {}
    groups = []
    for group in state["param_groups"]:
        ids = [number.setdefault(name, len(number)) for name in group["params"]]
        groups.append({**group, "params": ids})
    return {"state": {number[name]: value for name, value in state["state"].items()}, "param_groups": groups}


def _by_name(state: dict, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """``Optimizer.state_dict()``'s layout -> keyed by the parameter names of ``model``, for
    ``set_optimizer_state_dict``; index ``i`` is the ``i``-th parameter of ``optimizer.param_groups``."""
    names = {p: n for n, p in model.named_parameters()}
    order = [names[p] for p in chain.from_iterable(g["params"] for g in optimizer.param_groups)]
    groups = [{**group, "params": [order[i] for i in group["params"]]} for group in state["param_groups"]]
    return {"state": {order[i]: value for i, value in state["state"].items()}, "param_groups": groups}


def training_bytes(model: nn.Module, optimizers) -> dict[str, int]:
    """Bytes this process holds for training: ``parameters``, ``gradients`` and ``optimizer``
    state (a sharded tensor counts its local shard only). Buffers and activations, and the one or
    two layers FSDP gathers at a time, are not counted.

    Args:
        model: the (possibly sharded) model.
        optimizers: the optimisers (None entries are skipped).
    """
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # a torch built without distributed: nothing is sharded
        DTensor = ()  # noqa: N806 - isinstance(x, ()) is False

    def size(t) -> int:
        local = t.to_local() if isinstance(t, DTensor) else t
        return local.numel() * local.element_size()

    params = list(model.parameters())
    state = [v for opt in optimizers if opt is not None for s in opt.state.values() for v in s.values()
             if isinstance(v, torch.Tensor)]
    return {"parameters": sum(size(p) for p in params),
            "gradients": sum(size(p.grad) for p in params if p.grad is not None),
            "optimizer": sum(size(v) for v in state)}
