"""The published documents match the code: what docs/ says was generated is generated again here from
the committed records, and must equal what is committed. A failure names the document and its first
differing line: regenerate it with the command the failure gives (or fix the code)."""
import contextlib
import io
import json
import math
import re
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest
import yaml

from mtl_heads.analysis.reproduction import metrics_differences
from mtl_heads.folders import RETRAINING_METRICS, record_folder_name
from mtl_heads.study import check_claims, claims_json, claims_markdown, read_since, read_study, splice
from mtl_heads.study.core import mtl_name, task_name

REPO = Path(__file__).resolve().parents[1]
STUDY = "docs/ewt-study"
ROUND1 = f"{STUDY}/round1-claims.json"  # round 1's claims under today's rules: what each verdict is compared with
CLAIMS_COMMAND = f"python -m mtl_heads claims {STUDY} since={ROUND1} since_name='round 1'"


def assert_same(path: Path, generated: str, how: str) -> None:
    """``path``'s text equals ``generated``; else fail naming the first differing line."""
    committed = path.read_text()
    if committed == generated:
        return
    old, new = committed.splitlines(), generated.splitlines()
    line = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
    shown = lambda lines: lines[line][:300] if line < len(lines) else "(the end)"  # noqa: E731
    pytest.fail(f"{path.relative_to(REPO)} differs from what the code generates, first at line {line + 1}:\n"
                f"  committed: {shown(old)}\n  generated: {shown(new)}\nregenerate it: {how}")


def setting_name(tasks: list[str]) -> str:
    """The setting of a run training ``tasks`` (its metrics.json's list) as docs/ewt-results.md names it: ``STL POS``
    for one task, ``MTL-5`` for five (the claims' names, study.core.task_name and mtl_name)."""
    return f"STL {task_name(tasks[0])}" if len(tasks) == 1 else mtl_name("+".join(tasks))


def first_json_difference(old, new, where: str = "") -> str | None:
    """Where JSON values ``old`` and ``new`` first differ (a key path), else None. Floats equal to 1e-9
    relative count as the same: a sum or dot product's last digit depends on the machine's BLAS and
    SIMD width (a gate correlation read 0.44327712760282845 on one CPU and ...856 on another)."""
    if isinstance(old, float) and isinstance(new, float):
        return None if math.isclose(old, new, rel_tol=1e-9, abs_tol=1e-12) else where or "(top)"
    if isinstance(old, dict) and isinstance(new, dict):
        if list(old) != list(new):
            return f"{where or '(top)'} (keys)"
        return next((d for k in old if (d := first_json_difference(old[k], new[k], f"{where}.{k}"))), None)
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return f"{where or '(top)'} (length)"
        return next((d for i, (a, b) in enumerate(zip(old, new)) if (d := first_json_difference(a, b, f"{where}[{i}]"))),
                    None)
    return None if type(old) is type(new) and old == new else where or "(top)"


def assert_same_json(path: Path, generated: str, how: str) -> None:
    """``path`` holds the JSON ``generated`` is, floats to their last digits aside (first_json_difference);
    else fail as assert_same does, naming the first differing line and the key path."""
    difference = first_json_difference(json.loads(path.read_text()), json.loads(generated))
    if difference is not None:
        assert_same(path, generated, f"{how}\n(first difference at {difference})")


@pytest.fixture(scope="module")
def round2():
    """(study, claims) of the committed round-2 study under its rules, read as the command reads it."""
    with contextlib.chdir(REPO):  # the run folders are read as the command reads them, from the repository root
        study = read_study([STUDY])
        return study, check_claims(study)


@pytest.fixture(scope="module")
def claims_text(round2):
    """The claims of the committed study, as ``python -m mtl_heads claims docs/ewt-study`` writes them."""
    with contextlib.chdir(REPO):
        return claims_markdown(*round2, CLAIMS_COMMAND, read_since(ROUND1, "round 1"))


def test_study_claims_are_generated(claims_text):
    how = f"{CLAIMS_COMMAND} out={STUDY}/claims.md doc=docs/ewt-results.md"
    assert_same(REPO / STUDY / "claims.md", claims_text, how)
    doc = REPO / "docs" / "ewt-results.md"
    assert_same(doc, splice(doc.read_text(), claims_text, str(doc)), how)


ROUND3 = "docs/ewt-study-round3"  # round 3's runs: seeds 4 and 5, and the runs matched but for the pruning
ROUND3_CONTINUED = f"{ROUND3}/continued-claims.json"  # round 2 as published: what each verdict is compared with
ROUND3_OLD_RULES = f"{ROUND3}/round2-rules-claims.json"  # round 2's rules on round 3's runs: the rules' effect
ROUND3_COMMAND = (f"python -m mtl_heads claims {STUDY} {ROUND3} since={ROUND3_CONTINUED} since={ROUND3_OLD_RULES} "
                  "since_name='round 2' since_name='round 2'\"'\"'s rules on these runs' rules=round3 block=round3")


def test_round3_claims_are_generated(round2):
    """Round 3's claims (docs/ewt-study/rules-round3.md) over both study folders, as the doc stage writes them
    (STUDY=docs/ewt-study-round3 RULES=round3 DOC_BLOCK=round3 SINCE_NAME="round 2" bash docs/ewt-study.sh doc):
    the two claims JSONs each verdict is compared with, claims.md, and docs/ewt-results.md's round3 block."""
    from mtl_heads.study import RULE_SETS

    stage = ('STUDY=docs/ewt-study-round3 RULES=round3 DOC_BLOCK=round3 SINCE_NAME="round 2" bash docs/ewt-study.sh '
             "doc (its claims commands)")
    with contextlib.chdir(REPO):
        assert_same_json(REPO / ROUND3_CONTINUED, claims_json(*round2, f"python -m mtl_heads claims {STUDY}") + "\n",
                         f"python -m mtl_heads claims {STUDY} format=json out={ROUND3_CONTINUED}")
        both = read_study([STUDY, ROUND3])
        assert_same_json(REPO / ROUND3_OLD_RULES,
                         claims_json(both, check_claims(both), f"python -m mtl_heads claims {STUDY} {ROUND3}") + "\n",
                         f"python -m mtl_heads claims {STUDY} {ROUND3} format=json out={ROUND3_OLD_RULES}")
        study = read_study([STUDY, ROUND3], rules=RULE_SETS["round3"])
        since = [read_since(ROUND3_CONTINUED, "round 2"), read_since(ROUND3_OLD_RULES, "round 2's rules on these runs")]
        text = claims_markdown(study, check_claims(study), ROUND3_COMMAND, since)
    assert_same(REPO / ROUND3 / "claims.md", text, stage)
    doc = REPO / "docs" / "ewt-results.md"
    assert_same(doc, splice(doc.read_text(), text, str(doc), "round3"), stage)


def quoted_commit(marker: str = "rules-commit: ") -> str:
    """The commit that docs/ewt-results.md quotes after ``marker``: ``rules-commit: `` the rules of the
    study's current round, ``round1-record: `` the last commit whose record is round 1's runs alone."""
    text = (REPO / "docs" / "ewt-results.md").read_text()
    assert marker in text, f"docs/ewt-results.md quotes no '{marker}<sha>'"
    return text.split(marker, 1)[1].split()[0].strip("`.,;)")


def git_or_skip(args: list[str], commit: str, text: bool = True) -> subprocess.CompletedProcess:
    """``git args`` in the repository; skips where git or the history holding ``commit`` is not here."""
    try:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=text, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as err:
        pytest.skip(f"git cannot be run here: {err}")
    if done.returncode != 0:
        probe = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=REPO, capture_output=True, text=True)
        if probe.returncode != 0 or probe.stdout.strip() == "true":
            pytest.skip(f"no git history here to find {commit} in")
        pytest.fail(f"docs/ewt-results.md quotes {commit}, which git cannot read: {done.stderr!s:.300}")
    return done


def test_round_rules_are_unchanged_since_the_commit_the_doc_quotes():
    """docs/ewt-study/rules.md, which fixes the round's rules before its runs, is the file of the commit
    docs/ewt-results.md quotes (so a rule changed after the runs cannot pass unnoticed)."""
    commit = quoted_commit()
    shown = git_or_skip(["show", f"{commit}:docs/ewt-study/rules.md"], commit)
    assert shown.stdout == (REPO / "docs" / "ewt-study" / "rules.md").read_text(), (
        f"docs/ewt-study/rules.md changed since {commit}, the commit docs/ewt-results.md quotes for the round's rules")


def test_the_reproducible_mode_cost_quotes_its_record():
    """The training guide's cost of reproducible mode: each figure from docs/reproducible-cost.json
    (bench/reproducible_cost.py's record), the one-thread goal of 1.15 and the one-against-two-threads ratio."""
    record = json.loads((REPO / "docs" / "reproducible-cost.json").read_text())
    guide = (REPO / "docs" / "guides" / "training.md").read_text()
    text = " ".join(guide[guide.index("What it costs, measured by"):guide.index("Turn the mode off")].split())
    one, two = record["by_threads"]["1"], record["by_threads"]["2"]
    assert (f"at one thread the pinned step took {one['pinned_seconds_per_step']:.3f} s against the default's "
            f"{one['default_seconds_per_step']:.3f} s ({one['ratio']:.3f} times, within the goal of 1.15") in text
    assert one["ratio"] <= 1.15
    assert (f"at two threads {two['pinned_seconds_per_step']:.3f} s against {two['default_seconds_per_step']:.3f} s "
            f"({two['ratio']:.3f} times)") in text
    assert f"is {one['pinned_seconds_per_step'] / two['default_seconds_per_step']:.2f} times the step time" in text
    assert record["cpu"]["name"] in text and "2-core" in text and record["cpu"]["threads"] == 2


ROUND3_RULES = "docs/ewt-study/rules-round3.md"
ROUND3 = "docs/ewt-study-round3"


def git_lines(args: list[str]) -> list[str]:
    """``git args``' output lines; skips where git or the history is not here (a shallow clone, an archive)."""
    try:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=120)
        shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=REPO, capture_output=True,
                                 text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        pytest.skip(f"git cannot be run here: {err}")
    if done.returncode != 0 or shallow.returncode != 0 or shallow.stdout.strip() == "true":
        pytest.skip("no full git history here")
    return done.stdout.splitlines()


def test_every_round3_record_was_committed_after_round3s_rules():
    """docs/ewt-study/rules-round3.md fixes round 3's rules before its runs: the last commit that touched it
    is an ancestor of the commit that added each file of a round-3 record (docs/ewt-study-round3/), so a rule
    changed after its data fails here."""
    (rules,) = git_lines(["log", "-1", "--format=%H", "--", ROUND3_RULES]) or pytest.fail(f"{ROUND3_RULES} is not committed")
    added = git_lines(["log", "--diff-filter=A", "--format=%H", "--name-only", "--", ROUND3])
    commit, late = None, []
    for line in added:
        if len(line) == 40 and all(c in "0123456789abcdef" for c in line):
            commit = line
        elif line and not line.endswith(".gitignore"):
            after = subprocess.run(["git", "merge-base", "--is-ancestor", rules, commit], cwd=REPO).returncode == 0
            if not after or commit == rules:
                late.append(f"{line} (added in {commit[:10]})")
    assert not late, f"round-3 records not committed after the rules' last commit {rules[:10]}: {late[:5]}"


def test_amendment_1_says_what_the_importance_matched_records_hold():
    """docs/ewt-study/rules-round3-amendment-1.md's numbers: the smallest importance-matched null of round 3's records
    holds C(4, 1)^3 = 64 sets (so two seeds drawn independently would tie at 1 / 4,096), its held-out set is of 6 or 7
    heads, and the records' random sets are drawn from numpy seed 0, not the shuffle nulls' 20261129."""

    from mtl_heads.model.headsets import head_grid, possible_sets

    text = " ".join((REPO / "docs" / "ewt-study" / "rules-round3-amendment-1.md").read_text().split())
    spaces = []
    for path in sorted((REPO / ROUND3).glob("**/ablation.json")):
        record = json.loads(path.read_text())
        if record.get("matched") == "layer and importance":
            cells = np.array(record["importance_cells"])
            grid = head_grid(record["heads"], *cells.shape)
            spaces.append((possible_sets(grid, 1, cells), len(record["heads"]), record["seed"]))
    assert spaces, "no importance-matched record in round 3's folder"
    smallest = min(n for n, _, _ in spaces)
    assert smallest == math.comb(4, 1) ** 3 and "as few as C(4, 1)^3 of them" in text
    assert {k for n, k, _ in spaces if n == smallest} <= {6, 7} and "a held-out set of 6 or 7 heads" in text
    assert f"1 / {smallest ** 2:,} for two seeds of {smallest} sets" in text
    assert {seed for *_, seed in spaces} == {0} and "the records' numpy seed 0" in text and "20261129" in text


def test_no_unfinished_ablation_is_committed():
    """An ablation still running keeps its passes in ablation.partial.json, which round 3's folder does not ignore
    (a session that ends on another machine hands them on); it is never part of a record: the claims read
    ablation.json alone, and a committed partial file would be read back by the next ablation of the run."""
    partial = [line for line in git_lines(["ls-files", "--", ROUND3, STUDY]) if line.endswith("/ablation.partial.json")]
    assert not partial, f"unfinished ablations committed (remove them with git rm --cached): {partial}"


def test_every_round3_run_trained_again_reproduced_its_weights():
    """docs/ewt-results.md says that every round-3 run trained again (its weights lost with a session's machine) has
    reproduced its weights bit for bit: each round-3 run folder keeping a retraining.metrics.json names the same
    weights_sha256 there as in its metrics.json (a run's annex, which holds no metrics.json, retrains a round-1 run
    whose record names no digest, and is not counted here)."""
    sentence = "Every round-3 run trained again so far has reproduced its weights bit for bit"
    doc = " ".join((REPO / "docs/ewt-results.md").read_text().split())
    retrained = [p.parent for p in sorted((REPO / ROUND3).glob("*/seed*/retraining.metrics.json"))
                 if (p.parent / "metrics.json").is_file()]
    if not retrained:
        assert sentence not in doc, "the doc speaks of round-3 runs trained again, and none is in the record"
        return
    assert sentence in doc
    for run in retrained:
        record, again = (json.loads((run / name).read_text()) for name in ("metrics.json", "retraining.metrics.json"))
        assert record.get("weights_sha256") and again.get("weights_sha256") == record["weights_sha256"], \
            f"{run.relative_to(REPO)}: its retraining did not reproduce its weights; correct docs/ewt-results.md"


def test_round3s_two_cuts_are_the_ones_the_doc_names():
    """docs/ewt-results.md says round 3 cut two things, in the rules' order: seeds 4 and 5 of the equal-sparsity
    settings (round 3 holds no ``<setting>-dp-budget`` folder, and round 2's seeds of each are those the doc lists)
    and the importance-matched null for seeds 1 to 3 (every importance-matched ablation, in either study folder,
    ablated a seed 4 or 5 run)."""
    doc = " ".join((REPO / "docs/ewt-results.md").read_text().split())
    assert not list((REPO / ROUND3).glob("*-dp-budget")), "round 3 has equal-sparsity runs: correct the doc's cuts"
    settings = {folder: sorted(int(p.parent.name.removeprefix("seed")) for p in folder.glob("seed*/metrics.json"))
                for folder in (REPO / STUDY).glob("*-dp-budget")}
    tasks = {folder: json.loads((folder / f"seed{seeds[0]}" / "metrics.json").read_text())["tasks"]
             for folder, seeds in settings.items()}
    order = max(tasks.values(), key=len)  # single tasks in the MTL setting's order (the study's), then MTL
    groups: dict[str, list[str]] = {}
    for folder in sorted(settings, key=lambda folder: (len(tasks[folder]), order.index(tasks[folder][0]))):
        seeds, name = settings[folder], setting_name(tasks[folder]).removeprefix("STL ")
        phrase = (f"{seeds[0]} to {seeds[-1]}" if len(seeds) > 2 else " and ".join(map(str, seeds))) \
            if seeds == list(range(1, len(seeds) + 1)) else ", ".join(map(str, seeds))
        groups.setdefault(phrase, []).append(name)
    listed = ", ".join(f"{phrase} of {', '.join(n[:-1]) + ' and ' + n[-1] if len(n) > 1 else n[0]}"
                       for phrase, n in groups.items())
    assert f"keep round 2's (seeds {listed})" in doc, f"the doc's equal-sparsity seeds are not round 2's: {listed}"
    assert "the importance-matched null was drawn for seeds 4 and 5 only" in doc
    for path in sorted((REPO / "docs").glob("ewt-study*/**/ablation.json")):
        record = json.loads(path.read_text())
        if record.get("matched") == "layer and importance":
            assert re.search(r"/seed[45]$", record["run"]), \
                f"{path.relative_to(REPO)}: an importance-matched ablation of {record['run']}; correct the doc's cuts"


def test_the_annex_retrainings_that_did_not_match_round_1s_record_are_the_ones_the_doc_names():
    """docs/ewt-results.md names, after "So far each matched its record", the round-1 runs trained again into a
    round-3 annex (a folder keeping retraining.metrics.json and no metrics.json) whose scores, dev curve, heads kept
    or other metrics differ from round 1's record (analysis.reproduction.metrics_differences; the retrain stage
    compares labels and gates too, the annex keeps only the retraining's metrics), each as ``STL DEP seed 1 (mean
    test score 87.97 → 87.96)``: exactly those, with those numbers, and none where every one matched."""
    doc = " ".join((REPO / "docs/ewt-results.md").read_text().split())
    sentence = re.search(r"So far each matched its record(?: except: (.*?\)))?\.(?: |$)", doc)
    assert sentence, "docs/ewt-results.md: the sentence on the annexes' retrainings is gone"
    named = re.findall(r"((?:STL [A-Z]+|MTL-5) seed \d) \(mean test score (\d+\.\d\d) → (\d+\.\d\d)\)",
                       sentence.group(1) or "")
    assert len(named) == len(re.findall(r"\(", sentence.group(1) or "")), f"unreadable: {sentence.group(0)}"
    different = []
    for again_path in sorted((REPO / ROUND3).glob(f"*/seed*/{RETRAINING_METRICS}")):
        annex = again_path.parent
        if (annex / "metrics.json").is_file():
            continue  # a round-3 run's own retraining (the digest test above)
        record = json.loads((REPO / STUDY / annex.parent.name / annex.name / "metrics.json").read_text())
        again = json.loads(again_path.read_text())
        if metrics_differences(record, again):
            who = f"{setting_name(record['tasks'])} seed {annex.name.removeprefix('seed')}"
            different.append((who, f"{record['test_mean']:.2f}", f"{again['test_mean']:.2f}"))
    assert sorted(named) == sorted(different), \
        f"docs/ewt-results.md names {named} as not matching round 1's record; the annexes say {different}"


def test_every_round3_record_that_read_weights_names_the_weights_of_its_run():
    """A round-3 ablation (ablation.json, key ``run``) or probe report (report.json, key ``model``) read a run's
    weights and names their SHA-256 (``weights_sha256``): the digest its run's record holds (metrics.json), or for a
    run's annex, which retrains a round-1 run whose record names none, its retraining's (retraining.metrics.json);
    a record that read a retraining kept beside the run (``.seed<N>.retrained``, not committed) is checked against
    the retraining.metrics.json of that seed's folder, and one that read a round-1 or round-2 run (seeds 1-3, under
    docs/ewt-study) against its annex's, ``docs/ewt-study-round3/<setting>/seed<N>``, where round 3 trained it
    again."""
    records = [(p, "run") for p in sorted((REPO / ROUND3).glob("**/ablation.json"))]
    records += [(p, "model") for p in sorted((REPO / ROUND3).glob("probes/*/report.json"))]
    wrong = []
    for path, key in records:
        record = json.loads(path.read_text())
        named = REPO / record[key]
        run = named.parent / record_folder_name(named.name)
        files = [run / "metrics.json", run / RETRAINING_METRICS]
        if run.parent.parent == REPO / STUDY:
            files.append(REPO / ROUND3 / run.parent.name / run.name / RETRAINING_METRICS)
        digests = [json.loads(file.read_text()).get("weights_sha256") for file in files if file.is_file()]
        digest = next((d for d in digests if d), None)
        if not record.get("weights_sha256") or record["weights_sha256"] != digest:
            wrong.append(f"{path.relative_to(REPO)}: names {record.get('weights_sha256')}, {record[key]} holds {digest}")
    assert records and not wrong, wrong


def test_round1_claims_are_generated_from_round1s_record(tmp_path):
    """docs/ewt-study/round1-claims.json, which each verdict of claims.md is compared with, is what today's
    claims code writes (format=json) on the study's record at the commit docs/ewt-results.md quotes as
    round1-record: round 1's runs alone, judged by the same rules and code as round 2's."""
    commit = quoted_commit("round1-record: ")
    archive = git_or_skip(["archive", commit, STUDY], commit, text=False)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tmp_path, filter="data")
    with contextlib.chdir(tmp_path):  # read as the command reads it, from the root of that tree
        study = read_study([STUDY])
        generated = claims_json(study, check_claims(study), f"python -m mtl_heads claims {STUDY}") + "\n"
    assert_same_json(REPO / ROUND1, generated,
                f"mkdir T && git archive {commit} {STUDY} | tar -x -C T && cd T && python -m mtl_heads claims {STUDY} "
                f"format=json out=$OLDPWD/{ROUND1}")


@pytest.fixture(scope="module")
def peers_blocks() -> dict[str, str]:
    """docs/peers.md's generated blocks as bench/peers.py writes them from docs/peers.json: ``peers2`` (the
    tables, ``--render``) and ``answer`` (the opening, ``--answer``), by their markers' names."""
    import importlib.util
    import sys

    pytest.importorskip("supar")
    spec = importlib.util.spec_from_file_location("peers_bench_render", REPO / "bench" / "peers.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # its dataclass looks its module up while the class is made
    try:
        spec.loader.exec_module(bench)
        results = bench.read_results(REPO / "docs" / "peers.json")
        return {"peers2": bench.render(results), "answer": bench.answer(results)}
    finally:
        sys.modules.pop(spec.name, None)


@pytest.mark.parametrize("block, flag", [("peers2", "--render"), ("answer", "--answer")])
def test_peers_blocks_are_generated_from_the_results_file(peers_blocks, block, flag):
    """docs/peers.md's tables and its opening answer are what ``python bench/peers.py --render`` and ``--answer``
    write from docs/peers.json; the answer stands within the doc's first 30 lines."""
    doc = REPO / "docs" / "peers.md"
    text = doc.read_text()
    begin, end = f"<!-- {block}:begin -->", f"<!-- {block}:end -->"
    assert begin in text and end in text, f"docs/peers.md has no <!-- {block}:begin/end --> block"
    spliced = text[:text.index(begin) + len(begin)] + "\n" + peers_blocks[block] + "\n" + text[text.index(end):]
    assert_same(doc, spliced, f"python bench/peers.py {flag} docs/peers.json (between the {block} markers of "
                              "docs/peers.md)")
    if block == "answer":
        assert text[:text.index(end)].count("\n") < 30, "docs/peers.md's answer ends after its first 30 lines"


def test_peers_hand_paragraphs_quote_the_generated_blocks(peers_blocks):
    """The hand-written prose of docs/peers.md about the results (the introduction under the answer, and round 2's
    reading up to round 3's rule) quotes no number of its own: each decimal in it is one of the generated blocks,
    which the test above checks against the records."""
    import re

    text = (REPO / "docs" / "peers.md").read_text()
    prose = (text[text.index("<!-- answer:end -->"):text.index("## Running it")]
             + text[text.index("**Reading it** (round 2"):text.index("## Round 3 rule")])
    quoted = re.findall(DECIMAL, prose)
    source = peers_blocks["answer"] + peers_blocks["peers2"]
    assert quoted and [n for n in quoted if not quoted_from(n, source)] == [], \
        "numbers of docs/peers.md's hand paragraphs not in its generated blocks"


def test_peers_round3_rule_is_unchanged_since_the_commit_the_doc_quotes():
    """docs/peers.md's Round 3 rule, committed before any run of round 3, is the text of the commit the doc quotes
    (``round3-rule-commit: ``), so that a rule changed after the runs cannot pass unnoticed."""
    text = (REPO / "docs" / "peers.md").read_text()
    marker = "round3-rule-commit: "
    assert marker in text, f"docs/peers.md quotes no '{marker}<sha>'"
    commit = text.split(marker, 1)[1].split()[0].strip("`.,;)")
    rule = lambda doc: doc[doc.index("## Round 3 rule"):].split("\n## ", 1)[0]  # noqa: E731
    then = git_or_skip(["show", f"{commit}:docs/peers.md"], commit).stdout
    assert rule(then) == rule(text), f"docs/peers.md's Round 3 rule changed since {commit}, the commit it quotes"


DECIMAL = r"[-+]?\d+\.\d+"  # a number as the hand paragraphs quote it


def hand_numbers(heading: str, end: str = "\n**") -> list[str]:
    """The decimals of docs/ewt-results.md's hand paragraph that starts at ``heading`` and runs to the first
    ``end`` after it (default: the next bold heading)."""
    import re

    text = (REPO / "docs" / "ewt-results.md").read_text()
    assert heading in text, f"docs/ewt-results.md has no {heading}"
    section = text[text.index(heading):]
    return re.findall(DECIMAL, section[:section.index(end, 1)])


def test_round1_numbers_written_by_hand_are_round1s():
    """The hand-written comparison of round 2's rules with round 1's, on round 1's runs (docs/ewt-results.md,
    from its heading to the next bold heading), quotes no number of its own: every decimal in it is in a line
    or an answer of docs/ewt-study/round1-claims.json (round 1's runs under round 2's rules)."""
    import json

    heading = "**What round 2's rules change, on round 1's runs**"
    quoted = hand_numbers(heading)
    claims = json.loads((REPO / ROUND1).read_text())["claims"]
    written = " ".join(line for claim in claims for line in [*claim["lines"], claim["answer"]])
    assert len(quoted) > 10 and [n for n in quoted if n not in written] == [], \
        f"numbers of docs/ewt-results.md's '{heading}' not in {ROUND1}"


def quoted_from(number: str, source: str) -> bool:
    """``number`` (a decimal as text, ``-1.5`` or ``1.5``) is a number of ``source``: written the same, or one
    with more decimals that rounds to it (``-`` and the minus sign ``\u2212`` alike; an unsigned ``number``
    may quote a negative one's size, as "drops 3.3" quotes a difference of -3.3)."""
    import re

    places = len(number.split(".")[1])
    for found in re.findall(DECIMAL, source.replace("\u2212", "-")):
        value = float(found) if number[0] in "+-" else abs(float(found))
        if len(found.split(".")[1]) >= places and f"{value:.{places}f}" == f"{float(number):.{places}f}":
            return True
    return False


def test_quoted_from_reads_a_rounding_not_a_neighbour():
    assert quoted_from("11.1", "drop 11.07 (by seed") and quoted_from("-15.6", "difference \u221215.62")
    assert quoted_from("3.3", "difference -3.31") and not quoted_from("-3.3", "difference 3.31")
    assert not quoted_from("11.1", "drop 11.17") and not quoted_from("0.088", "p 0.0886")
    assert quoted_from("0.088", "p 0.0877") and not quoted_from("2.80", "2.8") and quoted_from("2.8", "2.8x")


def test_round2_quotes_only_the_claims_block():
    """docs/ewt-results.md's hand paragraph **Round 2** says it gives no numbers of its own: every
    decimal in it is in the generated claims block (which the claims test checks against the records)."""
    heading = "**Round 2**"
    quoted = hand_numbers(heading)
    text = (REPO / "docs" / "ewt-results.md").read_text()
    block = text[text.index("<!-- claims:begin -->"):text.index("<!-- claims:end -->")]
    assert [n for n in quoted if not quoted_from(n, block)] == [], \
        f"numbers of docs/ewt-results.md's '{heading}' not in its claims block"


def test_round1_own_rule_changes_quote_round1s_generated_claims():
    """docs/ewt-results.md's hand paragraph on round 1's own rule changes (from its heading to the claims
    block) quotes round 1's generated claims blocks, which no code of today writes again: they are kept in
    docs/ewt-study/round1-own-rules-claims.md, each the claims block of docs/ewt-results.md at the commit
    its heading names (checked where git has the history), and every decimal of the paragraph is in one."""
    import re

    quoted = hand_numbers("**Round 1's own rule changes**", end="<!-- claims:begin -->")
    kept = (REPO / STUDY / "round1-own-rules-claims.md").read_text()
    blocks = re.findall(r"^## At ([0-9a-f]{7,40}) .*?\n\n(<!-- claims:begin -->.*?<!-- claims:end -->)", kept, re.S | re.M)
    assert len(blocks) == 3, "round1-own-rules-claims.md: expected three '## At <commit>' claims blocks"
    source = "\n".join(block for _, block in blocks)
    assert len(quoted) > 30 and [n for n in quoted if not quoted_from(n, source)] == [], \
        "numbers of docs/ewt-results.md's round 1 rule changes not in docs/ewt-study/round1-own-rules-claims.md"
    for commit, block in blocks:  # last, as a shallow clone skips here
        then = git_or_skip(["show", f"{commit}:docs/ewt-results.md"], commit).stdout
        assert block in then, f"round1-own-rules-claims.md: the block under {commit} is not that commit's"


def test_json_comparison_ignores_only_the_last_digits_of_floats():
    """The round-1 file's check lets a float's last digits differ (BLAS), nothing else."""
    old = {"a": [1, "x", {"value": 0.44327712760282845}], "b": None}
    assert first_json_difference(old, {"a": [1, "x", {"value": 0.44327712760282856}], "b": None}) is None
    assert first_json_difference(old, {"a": [1, "x", {"value": 0.4432775}], "b": None}) == ".a[2].value"
    assert first_json_difference(old, {"a": [1, "y", {"value": 0.44327712760282845}], "b": None}) == ".a[1]"
    assert first_json_difference(old, {"a": [1, "x"], "b": None}) == ".a (length)"
    assert first_json_difference(old, {"b": None, "a": old["a"]}) == "(top) (keys)"
    assert first_json_difference({"n": 1}, {"n": 1.0}) == ".n"  # an int that became a float is a change


def _heads_kept(*settings: str) -> tuple[int, int]:
    """(fewest, most) heads kept by the runs of ``settings`` in round 2's record."""
    kept = [json.loads(f.read_text())["heads_kept"] for s in settings for f in (REPO / STUDY).glob(f"{s}/seed*/metrics.json")]
    assert kept, f"no runs of {settings}"
    return min(kept), max(kept)


def test_round2_hand_sentences_say_what_the_records_hold():
    """The sentences of docs/ewt-results.md that issue 50 found out of date, as corrected, against the records."""
    from mtl_heads.study.rules import MIN_SEEDS

    doc = " ".join((REPO / "docs" / "ewt-results.md").read_text().split())
    lo, hi = _heads_kept("*-dp-budget")
    assert f"(`prune.budget=36`: each run's target is 36 of the 72 heads, met by a Lagrangian controller, and its " \
           f"runs keep {lo} to {hi})" in doc
    lo, hi = _heads_kept("ner-dp", "ner-sp", "srl-sp")
    assert f"(DP NER, SP NER and SP SRL: their runs keep {lo} to {hi} of the 72)" in doc
    assert MIN_SEEDS == 3 and "Welch's test only where both sides have three seeds or more" in doc
    same, differ = set(), set()
    for path in (REPO / STUDY).glob("*/seed*/retraining.metrics.json"):
        record = json.loads((path.parent / "metrics.json").read_text())["test"]
        again = json.loads(path.read_text())["test"]
        (same if again == record else differ).add((path.parent.parent.name, int(path.parent.name[4:])))
    assert same == {(s, n) for s in ("pos", "ner", "pos-dp") for n in (2, 3)}
    assert differ == {(s, n) for s in ("dep", "con", "srl", "mtl5", "dep-dp", "con-dp", "srl-dp", "mtl5-dp")
                      for n in (1, 2, 3)}
    assert ("those of POS seeds 2 and 3, NER seeds 2 and 3 and POS-DP seeds 2 and 3 gave their records' test scores; "
            "those of DEP, CON, SRL and MTL-5 seeds 1 to 3 and of DEP-DP, CON-DP, SRL-DP and MTL-5-DP seeds 1 to 3 did "
            "not") in doc
    inits = {n: yaml.safe_load((REPO / STUDY / "pos-dp-matched" / f"seed{n}" / "config.yaml").read_text())["init"]
             for n in (1, 2, 3)}
    assert inits == {1: f"{STUDY}/pos-dp/seed1", 2: f"{STUDY}/pos-dp/.seed2.retrained", 3: f"{STUDY}/pos-dp/seed3"}
    assert "POS-DP seeds 1 and 3 reproduced their records' files, so their matched runs started from the records' " \
           "own folders (`init` in their `config.yaml`); seed 2's started from its retraining" in doc
    assert "commit e4cba74 relabelled it *too few seeds to test*, after the data" in doc


def test_every_earlier_retraining_is_in_the_record():
    """A run trained again more than once keeps each earlier retraining's metrics as retraining.<k>.metrics.json:
    where git history is present, every earlier committed version of a retraining.metrics.json is one of them."""
    earlier = sorted(str(p.relative_to(REPO)) for p in (REPO / STUDY).glob("*/seed*/retraining.*.metrics.json"))
    assert len(earlier) == 5  # the block's header: "the 5 earlier retrainings"
    doc = " ".join((REPO / "docs" / "ewt-results.md").read_text().split())
    assert "of the 5 earlier retrainings of the same runs" in doc and "counts every retraining: 5 earlier ones" in doc
    for path in (REPO / STUDY).glob("*/seed*/retraining.metrics.json"):
        versions = git_lines(["log", "--format=%H", "--", str(path.relative_to(REPO))])
        for commit in versions[1:]:  # the versions a later retraining replaced, each kept beside it
            old = git_or_skip(["show", f"{commit}:{path.relative_to(REPO)}"], commit).stdout
            kept = [json.loads(p.read_text()) for p in path.parent.glob("retraining.*.metrics.json")]
            assert json.loads(old) in kept, f"{path}: the retraining of {commit[:7]} is not kept"


def test_round3_sentences_on_mtl5_ner_say_what_the_records_hold():
    """docs/ewt-results.md's two readings beside claim 6's MTL-5 NER numbers, from the ablation records: seeds 4 and
    5's importance-matched null (the drops averaged over the two seeds, set by set, and p = (1 + sets as high) /
    (1 + sets)), and seed 1's stem-cell drops on the annex's retraining (round 3) against round 2's record, whose
    shift is larger than the gap between seeds 4 and 5."""

    doc = " ".join((REPO / "docs" / "ewt-results.md").read_text().split())
    held_out = "ablation-dp-stem-cells-without-ner"
    read = lambda folder, seed, suffix="": json.loads(  # noqa: E731
        (REPO / folder / "mtl5" / f"seed{seed}" / f"{held_out}{suffix}" / "ablation.json").read_text())
    matched = [read(ROUND3, seed, "-importance-matched") for seed in (4, 5)]
    assert all(record["matched"] == "layer and importance" for record in matched)
    shown, side = {}, {}
    for method in ("zero", "mean"):
        drop = np.mean([record["methods"][method]["ner"]["drop"] for record in matched])
        null = np.mean([record["methods"][method]["ner"]["random_drops"] for record in matched], axis=0)
        p = (1 + int((null >= drop - 1e-9).sum())) / (1 + len(null))
        shown[method] = f"{null.mean():.2f} against {drop:.2f}, p {p:.2g}"
        side[method] = (null.mean() > drop, p >= 0.05)
    assert side == {"zero": (True, True), "mean": (False, True)}  # random sets cost more; less, not significantly
    assert f"with zero ablation ({shown['zero']}) and not significantly less with mean ablation ({shown['mean']})" \
        in doc
    drops = lambda record: [record["methods"][m]["ner"]["drop"] for m in ("zero", "mean")]  # noqa: E731
    annex, round2 = drops(read(ROUND3, 1)), drops(read(STUDY, 1))
    four, five = drops(read(ROUND3, 4)), drops(read(ROUND3, 5))
    pair = lambda values: " / ".join(f"{v:.2f}" for v in values)  # noqa: E731
    assert f"seed 1's stem cells cost MTL-5 NER {pair(annex)} F1 (zero / mean) on its annex's retraining and " \
           f"{pair(round2)} on the weights round 2's record read" in doc
    assert f"the gap between seeds 4 and 5 ({pair(four)} and {pair(five)})" in doc
    assert all(abs(a - b) > abs(c - d) for a, b, c, d in zip(annex, round2, four, five))
    assert read(STUDY, 1).get("weights_sha256") is None and "its digest not named" in doc
