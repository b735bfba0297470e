"""Gates: exact formulas, Monte-Carlo check of the expected L0, validation, registry."""

import math

import pytest
import torch

from mtl_heads.model.gate_constants import KEPT_AT, kept_count
from mtl_heads.model.gating import GATES, FixedGate, HardConcreteGate, build_gate, deterministic_gate


def test_hard_concrete_init_range_and_shape():
    torch.manual_seed(0)
    gate = HardConcreteGate(6, 12, init_range=0.68)
    assert gate.log_alpha.shape == (6, 12)
    assert gate.log_alpha.abs().max() <= 0.68
    assert gate.log_alpha.std() > 0.1  # really uniform, not a constant


def test_eval_formula_and_penalty():
    gate = HardConcreteGate(3, 4, beta=0.33, l=-0.1, r=1.1)
    with torch.no_grad():
        gate.log_alpha.copy_(torch.linspace(-6, 6, 12).view(3, 4))
    gate.eval()
    la = gate.log_alpha.detach()
    expected = (torch.sigmoid(la) * 1.2 - 0.1).clamp(0, 1)
    torch.testing.assert_close(gate(), expected)
    torch.testing.assert_close(gate.values(), expected)
    assert gate.values().requires_grad is False
    assert gate()[0, 0] == 0 and gate()[-1, -1] == 1  # clamped at both ends

    l0 = torch.sigmoid(la - 0.33 * math.log(0.1 / 1.1))
    torch.testing.assert_close(gate.expected_l0(), l0)
    # penalty = mean over layers of the sum over heads
    by_hand = sum(l0[i].sum() for i in range(3)) / 3
    torch.testing.assert_close(gate.penalty(), by_hand)


def test_deterministic_gate_is_the_eval_gate():
    """One formula: the module's eval values, and deterministic_gate on its log_alpha or on plain numbers."""
    gate = HardConcreteGate(2, 3, l=-0.2, r=1.3).eval()
    with torch.no_grad():
        gate.log_alpha.copy_(torch.tensor([[-9.0, -0.4, 0.0], [0.3, 2.0, 9.0]]))
    assert torch.equal(deterministic_gate(gate.log_alpha, -0.2, 1.3).detach(), gate.values())
    assert deterministic_gate(gate.log_alpha, -0.2, 1.3).requires_grad  # a parameter keeps its graph
    numbers = deterministic_gate([-9.0, 0.0, 9.0])  # default stretch (-0.1, 1.1), float64
    assert numbers.dtype == torch.float64
    assert numbers.tolist() == pytest.approx([0.0, 0.5, 1.0])


def test_kept_count_counts_gates_at_the_cut_off():
    import numpy as np

    values = [[KEPT_AT, KEPT_AT / 2, 0.0], [1.0, 0.5, 0.0011]]
    assert kept_count(torch.tensor(values, dtype=torch.float64)) == kept_count(np.array(values)) == 4


def test_training_samples_are_fresh_and_in_range():
    torch.manual_seed(0)
    gate = HardConcreteGate(2, 5).train()
    a, b = gate(), gate()
    assert not torch.equal(a, b)
    assert a.min() >= 0 and a.max() <= 1
    assert gate().shape == (2, 5)


def test_sample_formula_with_fixed_noise(monkeypatch):
    gate = HardConcreteGate(1, 3, beta=0.5, l=-0.2, r=1.3).train()
    with torch.no_grad():
        gate.log_alpha.copy_(torch.tensor([[-1.0, 0.0, 2.0]]))
    u = torch.tensor([[0.3, 0.5, 0.9]])
    monkeypatch.setattr(torch, "rand_like", lambda t: u.clone())
    s = torch.sigmoid((torch.log(u) - torch.log(1 - u) + gate.log_alpha.detach()) / 0.5)
    torch.testing.assert_close(gate(), (s * 1.5 - 0.2).clamp(0, 1))


def test_extreme_noise_is_finite(monkeypatch):
    gate = HardConcreteGate(1, 2).train()
    monkeypatch.setattr(torch, "rand_like", lambda t: torch.tensor([[0.0, 1.0]]))
    g = gate()
    assert torch.isfinite(g).all()
    g.sum().backward()
    assert torch.isfinite(gate.log_alpha.grad).all()


@pytest.mark.parametrize("log_alpha", [-2.0, 0.0, 1.5])
def test_expected_l0_matches_monte_carlo(log_alpha):
    torch.manual_seed(1234)
    n = 1_000_000  # one sample per "head": a single forward gives n samples
    gate = HardConcreteGate(1, n).train()
    with torch.no_grad():
        gate.log_alpha.fill_(log_alpha)
        frac_open = (gate() != 0).float().mean().item()
    closed_form = gate.expected_l0()[0, 0].item()
    assert abs(frac_open - closed_form) / closed_form < 0.01


def test_gradients_reach_log_alpha():
    torch.manual_seed(0)
    gate = HardConcreteGate(2, 3).train()
    loss = sum((gate() * torch.arange(1.0, 7.0).view(2, 3)).sum() for _ in range(20))
    (loss + gate.penalty()).backward()
    assert (gate.log_alpha.grad != 0).all()


def test_fixed_gate_hard_and_soft():
    mask = torch.tensor([[1.0, 0.0], [0.25, 1.0]])
    gate = FixedGate(mask)
    torch.testing.assert_close(gate(), mask)
    torch.testing.assert_close(gate.values(), mask)
    assert gate.penalty().item() == 0
    assert "mask" in dict(gate.named_buffers())
    assert not list(gate.parameters())
    mask[0, 0] = 0.5  # the gate keeps its own copy
    assert gate()[0, 0] == 1


@pytest.mark.parametrize(
    "bad, message",
    [(torch.ones(3), "layers, heads"), (torch.full((2, 2), 1.5), r"\[0, 1\]"), (-torch.ones(2, 2), r"\[0, 1\]")],
)
def test_fixed_gate_validation(bad, message):
    with pytest.raises(ValueError, match=message):
        FixedGate(bad)


def test_build_gate_registry():
    assert set(GATES) == {"none", "fixed", "hard_concrete"}
    assert build_gate("none", 2, 3) is None
    hc = build_gate("hard_concrete", 2, 3, beta=0.5)
    assert isinstance(hc, HardConcreteGate) and hc.beta == 0.5 and hc.log_alpha.shape == (2, 3)
    fixed = build_gate("fixed", 2, 3, mask=[[1, 0, 1], [1, 1, 0]])
    assert isinstance(fixed, FixedGate)
    with pytest.raises(ValueError, match=r"\(2, 3\)"):
        build_gate("fixed", 2, 3, mask=torch.ones(3, 2))
    with pytest.raises(ValueError, match="hard_concrete"):
        build_gate("magic", 2, 3)


def test_grouped_gates_one_value_per_kv_group():
    from mtl_heads.model.gating import GateMaskError, GroupedGate

    torch.manual_seed(0)
    grouped = build_gate("hard_concrete", 2, 6, group_size=3, init_range=0.5)
    assert isinstance(grouped, GroupedGate) and grouped.base.log_alpha.shape == (2, 2)
    assert isinstance(build_gate("hard_concrete", 2, 6, group_size=1), HardConcreteGate)
    grouped.train()
    sample = grouped()  # [layers, heads]: one draw per group, repeated for its 3 query heads
    assert sample.shape == (2, 6) and torch.equal(sample, sample[:, ::3].repeat_interleave(3, dim=1))
    torch.testing.assert_close(grouped.expected_l0().sum(), 3 * grouped.base.expected_l0().sum())
    torch.testing.assert_close(grouped.penalty(), 3 * grouped.base.penalty())
    grouped.penalty().backward()
    assert (grouped.base.log_alpha.grad != 0).all()
    fixed = build_gate("fixed", 1, 4, group_size=2, mask=[[0.5, 1.0]])
    assert fixed.values().tolist() == [[0.5, 0.5, 1.0, 1.0]]
    assert build_gate("fixed", 1, 4, group_size=2, mask=[[0, 0, 1, 1]]).values().tolist() == [[0, 0, 1, 1]]
    with pytest.raises(GateMaskError, match="one value per group"):
        build_gate("fixed", 1, 4, group_size=2, mask=[[0, 1, 1, 1]])
    with pytest.raises(GateMaskError, match=r"\(1, 2\).*\(1, 4\)"):
        build_gate("fixed", 1, 4, group_size=2, mask=[[1, 1, 1]])
    with pytest.raises(ValueError, match="does not divide"):
        build_gate("hard_concrete", 2, 6, group_size=4)
