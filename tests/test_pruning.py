"""Static and dynamic pruning, the head-budget controller, and multi-seed experiments."""
import json

import pytest
import torch
from safetensors.torch import load_file

from mtl_heads.config import ConfigError, load_config
from mtl_heads.model.gating import HardConcreteGate
from mtl_heads.model.sparsity import LagrangianBudget, Pruning, Sparsity, resolve_budget, resolve_lambda, sparsity_of
from mtl_heads.training.experiment import run, run_seeds


@pytest.fixture
def base(tiny_encoder_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("MTL_HEADS_CACHE", str(tmp_path / "cache"))
    return [f"encoder.name={tiny_encoder_dir}", "data.demo_sizes={train: 32, dev: 16, test: 16}",
            "train.epochs=1", "train.batch_size=8", "train.eval_batch_size=16", "wandb.mode=disabled",
            "train.progress=false", "seed=3"]


@pytest.fixture
def trained(tiny_runs, base):
    """A finished (unpruned) POS+NER run (``base``'s arguments), trained once for the session: read only."""
    return tiny_runs(*base[1:], "tasks=pos,ner")


def weights(folder):
    return load_file(str(folder / "model.safetensors"))


def test_static_pruning_keeps_decoders_and_learns_gates(base, trained, tmp_path):
    out = tmp_path / "sp"
    metrics = run(base + ["prune=static", f"init={trained}", "tasks=pos", f"run_dir={out}", "train.lr_gate=0.05"])
    before, after = weights(trained), weights(out)
    decoder_keys = [k for k in after if k.startswith("decoders.")]
    assert decoder_keys and all(k.startswith("decoders.pos.") for k in decoder_keys)  # only the asked task
    assert all(torch.equal(before[k], after[k]) for k in decoder_keys)
    encoder_keys = [k for k in after if k.startswith("encoder.model.")]
    assert any(not torch.equal(before[k], after[k]) for k in encoder_keys)  # encoder not frozen by default
    # fresh gates at the reference init (centre 0), then learnt: not the trained run's open gates
    assert not torch.equal(before["encoder.gate.log_alpha"], after["encoder.gate.log_alpha"])
    assert after["encoder.gate.log_alpha"].abs().max() < 2.0
    assert metrics["prune"] == "static" and metrics["heads_total"] == 8
    saved = load_config_file(out)
    assert saved.encoder.name == load_config_file(trained).encoder.name and list(saved.tasks) == ["pos"]


def test_static_pruning_with_frozen_encoder_moves_only_gates(base, trained, tmp_path):
    out = tmp_path / "sp-frozen"
    run(base + ["prune=static", f"init={trained}", "prune.freeze_encoder=true", f"run_dir={out}", "train.lr_gate=0.05"])
    before, after = weights(trained), weights(out)
    moved = {k for k in after if not torch.equal(before[k], after[k])}
    assert moved == {"encoder.gate.log_alpha"}


def test_dynamic_pruning_moves_gates_and_encoder_and_closes_heads(base, tiny_encoder_dir, tmp_path):
    plain = tmp_path / "plain"
    run(base + ["tasks=pos", f"run_dir={plain}", "encoder.gate_init_mean=0"])
    out = tmp_path / "dp"
    metrics = run(base + ["tasks=pos", "prune=dynamic", "prune.lambda=5", "train.lr_gate=0.2", "train.epochs=3",
                          f"run_dir={out}"])
    start, end = weights(plain), weights(out)  # same seed, same init: the plain run shows where DP started
    assert not torch.equal(start["encoder.model.encoder.layer.0.attention.self.query.weight"],
                           end["encoder.model.encoder.layer.0.attention.self.query.weight"])
    gates = json.loads((out / "gates.json").read_text())
    assert gates["kept"] < 8 and metrics["heads_kept"] == gates["kept"]  # a strong lambda prunes heads
    assert all("heads_kept" in record for record in metrics["history"])
    assert metrics["best_epoch"] == 3  # pruning keeps the last epoch (train.select=auto)


def test_dynamic_run_continued_with_its_gates(base, tmp_path):
    """prune.init_gates=init: a DP run trained on from another's weights starts from its learnt gates
    (fresh gates otherwise), at the new encoder rate; a bad value or init_gates without init= fails."""
    first = tmp_path / "dp"
    run(base + ["tasks=pos", "prune=dynamic", "prune.lambda=5", "train.lr_gate=0.2", f"run_dir={first}"])
    learnt = weights(first)["encoder.gate.log_alpha"]
    starts = {}
    for mode in ("init", "fresh"):  # train.lr_gate=1e-12: Adam's steps move a gate by about 1e-12 each
        out = tmp_path / f"then-{mode}"
        run(base + ["prune=dynamic", f"init={first}", f"prune.init_gates={mode}", "train.lr_gate=1e-12",
                    "train.lr_encoder=1e-5", f"run_dir={out}"])
        starts[mode] = weights(out)["encoder.gate.log_alpha"]
        assert load_config_file(out).train.lr_encoder == 1e-5
    assert torch.allclose(starts["init"], learnt, rtol=0, atol=1e-9)
    assert (starts["fresh"] - learnt).abs().max() > 0.1
    with pytest.raises(ConfigError, match="prune.init_gates"):
        run(base + ["prune=dynamic", f"init={first}", "prune.init_gates=kept", f"run_dir={tmp_path / 'bad'}"])
    with pytest.raises(ConfigError, match="no init= is set"):
        run(base + ["prune=dynamic", "prune.init_gates=init", f"run_dir={tmp_path / 'bad2'}"])
    assert not (tmp_path / "bad").exists() and not (tmp_path / "bad2").exists()


def test_budget_controller_lands_within_one_head():
    """A toy objective where every head is useful (reward 1 per open head): only the budget's
    Lagrangian pressure closes heads, and it must stop at the target."""
    torch.manual_seed(0)
    gate = HardConcreteGate(2, 4)
    budget = LagrangianBudget(target=3, total=8)
    optimizer = torch.optim.Adam([{"params": gate.parameters(), "lr": 0.1},
                                  {"params": budget.parameters(), "lr": 0.05}])
    utility = torch.tensor([[1.0, 3.0, 1.0, 1.0], [1.0, 3.0, 1.0, 3.0]])  # three heads far more useful
    for _ in range(1500):
        optimizer.zero_grad()
        loss = -(gate() * utility).sum() / 8 + budget(gate.expected_l0())
        loss.backward()
        optimizer.step()
    kept = int((gate.values() >= 1e-3).sum())
    assert abs(kept - 3) <= 1
    assert budget.lambda_1.item() > 0  # the multiplier rose (ascent), it did not descend
    # the most useful heads are the ones kept
    assert set(gate.values().flatten().nonzero().flatten().tolist()) >= {1, 5, 7}


def test_budget_run_lands_within_one_head_on_a_tiny_model(base, tmp_path):
    out = tmp_path / "budget"
    metrics = run(base + ["tasks=pos", "prune=dynamic", "prune.budget=0.5", f"run_dir={out}",
                          "data.demo_sizes={train: 64, dev: 16, test: 16}", "train.batch_size=4", "train.epochs=8",
                          "train.lr_gate=0.1", "prune.lr_lagrangian=0.05"])
    assert metrics["heads_total"] == 8 and abs(metrics["heads_kept"] - 4) <= 1
    assert abs(metrics["history"][-1]["expected_heads"] - 4) <= 1
    gates = json.loads((out / "gates.json").read_text())
    assert sum(v >= 1e-3 for row in gates["values"] for v in row) == metrics["heads_kept"]
    state = torch.load(out / "checkpoint" / "state.pt", weights_only=False)
    assert set(state["sparsity"]) == {"lambda_1", "lambda_2"}


def test_budget_eval_rule_keeps_round_expected_heads():
    gate = HardConcreteGate(2, 4, eval_keep_expected=True)
    with torch.no_grad():
        gate.log_alpha.copy_(torch.tensor([[3.0, -1.0, 0.5, -0.2], [2.0, -4.0, 1.0, 0.1]]))
    gate.eval()
    expected = round(gate.expected_l0().sum().item())
    kept = gate().flatten().nonzero().flatten().tolist()
    assert len(kept) == expected
    assert set(kept) == set(gate.log_alpha.flatten().argsort(descending=True)[:expected].tolist())
    plain = HardConcreteGate(2, 4)
    plain.load_state_dict(gate.state_dict())
    plain.eval()
    assert torch.equal(gate()[gate() > 0], plain()[gate() > 0])  # kept heads keep their soft values


def test_lambda_and_budget_resolution():
    assert resolve_lambda("auto", ["ner"]) == 0.0002 and resolve_lambda("auto", ["dep"]) == 0.01
    assert resolve_lambda("auto", ["pos", "ner"]) == 0.001 and resolve_lambda("0.5", ["pos"]) == 0.5
    with pytest.raises(ConfigError, match="prune.lambda"):
        resolve_lambda("lots", ["pos"])
    assert resolve_budget(0.5, 144) == 72 and resolve_budget(36, 144) == 36 and resolve_budget(None, 8) is None
    for bad in (0, 145, 1.5, "half", True):
        with pytest.raises(ConfigError, match="prune.budget"):
            resolve_budget(bad, 144)
    cfg = load_config(["prune=dynamic", "tasks=srl"])
    sparsity = sparsity_of(Pruning.from_config(cfg), HardConcreteGate(2, 4))
    assert sparsity.weight == 0.001 and sparsity.controller is None
    with pytest.raises(ConfigError, match="prune.mode"):
        Sparsity(None, "dynamic")


def test_static_pruning_errors(base, trained, tmp_path):
    with pytest.raises(ConfigError, match="'init'"):
        run(base + ["prune=static", f"run_dir={tmp_path / 'x'}"])
    with pytest.raises(ConfigError, match="'init'"):
        run(base + ["prune=static", f"init={tmp_path / 'nothing'}", f"run_dir={tmp_path / 'x'}"])
    with pytest.raises(ConfigError, match="no decoder for dep"):
        run(base + ["prune=static", f"init={trained}", "tasks=dep", f"run_dir={tmp_path / 'x'}"])
    with pytest.raises(ConfigError, match="prune.mode"):
        run(base + ["prune.mode=sometimes", f"run_dir={tmp_path / 'x'}"])


def test_seeds_write_sibling_runs_of_one_experiment_and_resume_skips_finished(base, tmp_path):
    parent = tmp_path / "exp"
    args = base + ["tasks=pos", "seeds=1,2", "experiment=pos-seeds", f"run_dir={parent}"]
    results = run_seeds(args)
    assert [r["seed"] for r in results] == [1, 2] and {r["experiment"] for r in results} == {"pos-seeds"}
    assert (parent / "seed1" / "metrics.json").exists() and (parent / "seed2" / "metrics.json").exists()
    assert load_config_file(parent / "seed2").seed == 2
    assert results[0]["history"] != results[1]["history"]  # different seeds, different runs
    again = run_seeds(args + ["resume=true"])  # both finished: nothing retrained
    assert [r["test"] for r in again] == [r["test"] for r in results]
    with pytest.raises(ConfigError, match="already holds a run"):
        run_seeds(args)


def load_config_file(folder):
    from omegaconf import OmegaConf

    return OmegaConf.load(folder / "config.yaml")


class Stop(Exception):
    pass


def test_static_pruning_stopped_before_its_first_checkpoint_resumes_from_init(base, trained, tmp_path):
    """resume=true on an SP run that wrote no checkpoint yet starts over from init= (its frozen
    decoders are the trained run's), not from random decoders."""
    def stop(trainer):
        raise Stop()

    out = tmp_path / "sp"
    with pytest.raises(Stop):
        run(base + ["prune=static", f"init={trained}", f"run_dir={out}"], on_step=stop)
    assert (out / "config.yaml").exists() and not (out / "checkpoint").exists()
    run(base + ["resume=true", f"run_dir={out}"])
    before, after = weights(trained), weights(out)
    decoder_keys = [k for k in after if k.startswith("decoders.")]
    assert decoder_keys and all(torch.equal(before[k], after[k]) for k in decoder_keys)
