"""The rules every claim is held to, fixed before any number is read: the verdicts' definitions
(:data:`VERDICT_RULES`), the statistics all claims share (:data:`TESTS`, with the numbers it names), and the
words a verdict is written in. ``docs/ewt-study/rules.md`` says the same in full; changing a rule after
the runs it judges is what tests/test_published.py's rules-commit check catches.

A study is judged by one *round* of rules (:class:`Rules`; :data:`RULE_SETS` by name, ``rules=`` of
``python -m mtl_heads claims``): :data:`ROUND2` (``docs/ewt-study/rules.md``, the constants above it) or
:data:`ROUND3` (``docs/ewt-study/rules-round3.md``: each verdict's Holm family named by its members, exact
nulls where they exist, Monte Carlo nulls from a named seed with their standard errors, claim 6 against two
nulls, claim 5 read from the runs matched but for the pruning)."""
from __future__ import annotations

from dataclasses import dataclass, field

from mtl_heads.config import ConfigError
from mtl_heads.reports.significance import ALPHA

__all__ = ["ALPHA", "NEAR_ALL", "CLAIM_SHUFFLES", "FLOOR", "MIN_SEEDS", "MARGIN", "VERDICT_METHODS", "TOO_FEW", "TESTS",
           "VERDICT_RULES", "MATCHED_RULE", "REPLICATION", "SUPPORT", "Rules", "ROUND2", "ROUND3", "RULE_SETS",
           "DESCRIPTIVE"]

NEAR_ALL = 0.95  # a setting keeping at least this share of the heads (in most of its seeds) did not prune
CLAIM_SHUFFLES = 10_000  # shuffles / random sets of every null here: Holm over a claim's tests needs small p
FLOOR = 1 / (CLAIM_SHUFFLES + 1)  # the smallest p of CLAIM_SHUFFLES shuffles or random sets
MIN_SEEDS = 3  # a t-test needs this many values a group (2 leaves 1 degree of freedom): else "too few seeds to test"
MARGIN = 0.5  # claim 5's non-inferiority margin, in points of the test score
VERDICT_METHODS = ("zero", "mean")  # ablations a "needed" verdict reads (resample is shown)
TOO_FEW = f"too few seeds to test (a t-test needs {MIN_SEEDS} a group)"
TESTS = ("Tests: Welch's t-test over seeds (unequal variances; two-sided unless a rule says one-sided) for scores, "
         f"with at least {MIN_SEEDS} seeds a group (fewer: *too few seeds to test*); for gates and head sets, "
         f"permutation nulls of {CLAIM_SHUFFLES:,} shuffles or random sets (one-sided), each twice: *global* (heads "
         "anywhere in the grid) and *layer-aware* (heads moved only within their layer, or random sets with the "
         "same number of heads per layer: pruning keeps low layers far more than high ones, so a global null "
         "rewards layer position alone); a verdict reads the larger p of the two. Each claim's p-values are "
         f"adjusted together (Holm-Bonferroni) unless its rule names its families: `p raw, Holm adjusted`; "
         f"significant: adjusted p < {ALPHA}; a p within 10% of {ALPHA} is printed with 3 digits. A test from n "
         "shuffles or random sets cannot go below 1/(n+1), so in a family of m tests none can pass unless "
         f"m/(n+1) < {ALPHA}: such a test says *cannot reach significance* and the sets it needs (20m), and a "
         f"verdict that rests on it reads *cannot be tested*. A setting that keeps at least {NEAR_ALL:.0%} of its "
         "heads (in most of its seeds) *did not prune* and is left out of overlaps and intersections. Stability: "
         "every verdict and every significant test is recomputed with each seed left out in turn; one that changes "
         "is marked *fragile*, with the seed, one that holds *stable*; a change that comes only from t-tests left "
         "with too few seeds is *too few seeds to test*, not fragile.")
# the rules of the study's second round, fixed before its runs (docs/ewt-study/rules.md says the same in full)
VERDICT_RULES = {
    "mtl": "replicated when MTL loses to STL (Holm-adjusted Welch p < 0.05) on more than half of the tasks "
           "trained under equal conditions (a task with a known confound is shown, not counted); partly when it "
           "loses on at least one of them and gains significantly on none; not replicated otherwise.",
    "overlap": "counted: pairs of single-task settings that both pruned. Two tests a pair, each against a global "
               "and a layer-aware null (the larger p), Holm-adjusted together: kept-head Jaccard and gate "
               "correlation. The kept sets decide (the claim is about which heads survive): in the paper's regime "
               "(DP; else the first present), replicated when every counted pair's Jaccard is significant, partly "
               "when some are, not replicated when none is; the gate-correlation verdict is shown beside it.",
    "stem": "stem cells: heads kept in every single-task setting that pruned. In the paper's regime (DP; else the "
            "first present): replicated when their count beats both chance counts (global and within layers; "
            "the larger p, Holm-adjusted) and they rank above random head sets of their size against both nulls "
            "for more than half of the pretrained encoder's probes; partly when only the count does; not "
            "replicated otherwise.",
    "probes": "per task with all three models: STL sharpens when its probe score is above the pretrained "
              "encoder's (one-sample t-test over STL's seeds), MTL spreads when its score is below STL's "
              "(Welch), each Holm-adjusted p < 0.05. Replicated when both hold for more than half of those "
              "tasks; partly when both hold for at least one; not replicated otherwise.",
    "sp_dp": f"counted: settings (tasks, and MTL) whose DP and SP both pruned. Per setting, one-sided Welch tests "
             f"over seeds, Holm-adjusted with the claim's other tests: *fewer heads* (DP's heads kept below SP's) "
             f"and *not lower*, non-inferiority with a margin of {MARGIN:g} points (H0: DP - SP <= -{MARGIN:g} on the "
             f"test score; MTL: the mean over its tasks; the one-sided 95% lower bound of DP - SP is shown). DP wins "
             f"a setting when both are significant; it loses when SP keeps significantly fewer heads or DP's score "
             f"is significantly more than {MARGIN:g} below SP's. Replicated when DP wins every counted setting, "
             f"partly when some, not replicated when it wins none and loses every other; inconclusive otherwise. "
             f"Shown too: whether DP and SP keep the same heads (gate correlation and Jaccard against both nulls).",
    "needed": "held out: for each task T, the stem cells found without T (heads kept in every other single-task "
              "setting of the regime that pruned) ablated in T's unpruned runs (STL, and MTL scored on T), against "
              "layer-matched random head sets of the same size, seeds pooled (p = share of random-set draws whose "
              "drop, averaged over the seeds, is at least the stem cells'). One Holm family per regime and method "
              "over the (model, task) pairs; a (model, task) needs its held-out stem cells when zero and mean "
              "ablation are both significant (an intersection-union test). DP's sets decide (else the first "
              "regime ablated): supported when more than half of the (model, task) pairs need them, partly "
              "supported when at least one does, not supported otherwise. The paper does not test this claim.",
}
# claim 5 with DP runs trained on SP's schedule: appended to its rule only when the study has such runs
MATCHED_RULE = ("With DP runs trained on SP's schedule (the same encoder epochs and rates, SP's baseline counted), "
                "each is compared with SP on its own line, as above, and the verdict reads those matched comparisons "
                "(every one whose DP and SP both pruned); the comparisons as first run, whose encoder training "
                "differs, are shown with their confound and not counted.")
# the verdict words: He & Choi's claims are replicated or not; one the paper does not make is supported or not
REPLICATION = {"yes": "replicated", "partly": "partly replicated", "no": "not replicated",
               "inconclusive": "inconclusive"}
SUPPORT = {"yes": "supported", "partly": "partly supported", "no": "not supported", "inconclusive": "inconclusive"}


# --- the rounds -----------------------------------------------------------------------------------------
DESCRIPTIVE = "descriptive"  # the family name of round 3's tests that no verdict reads (a family of their kind)


@dataclass(frozen=True)
class Rules:
    """One round's rules: what the claims' tests draw and how their families and verdicts are formed.

    ``name`` (``round2``), ``file`` (where they are written in full), ``shuffles`` (draws of every shuffle null:
    claims 2, 3 and 5's same-heads tests), ``seed`` (numpy ``default_rng`` seed of every Monte Carlo null),
    ``named_families`` (each verdict's Holm family holds exactly the tests it reads, every other test a
    descriptive family of its kind; False: one family per claim unless the claim names its own),
    ``exact`` (the global null of a kept-set Jaccard computed exactly, hypergeometric), ``standard_errors``
    (every Monte Carlo p printed with its standard error; a Holm-adjusted p within 2 of them of
    :data:`ALPHA` is *not resolved* and counts as not significant), ``nulls`` (claim 6: the random-set nulls a
    pair's zero and mean ablation must each beat for it to need its stem cells), ``matched`` (claim 5's
    deciding runs: ``encoder``, DP whose encoder was trained on SP's schedule; ``phases``, DP run on SP's
    whole schedule in one run, decoders frozen in SP's epochs, ``train.phases``), ``stem_seeds`` (claim 6:
    the seeds whose DP runs choose the held-out stem cells, so that the ablated sets stay those the
    ablations drew whatever seed stability leaves out; empty: every seed of the study), ``first_sets``
    (claim 6: the random sets per seed a test reads first, the first of its records' sets; 0: all of them),
    ``extended_sets`` (claim 6: the random sets per seed that a random-set test whose Holm p lies within 2
    standard errors of :data:`ALPHA` is read, or drawn again, with; 0: none, the p is read as it is; records
    drawn with that many sets from the start extend without a new draw, since the first ``first_sets`` of
    them are the first draw's), ``exact_sets`` (claim 6: the amendment, a file, under which a random-set test whose
    null's every set has been scored in each seed pooled is read from that null's exact law, the Monte Carlo
    reading shown beside; ``""``: none), ``verdict_rules``
    (each claim's rule in words) and ``tests`` (the statistics every claim shares, in words)."""

    name: str
    file: str
    shuffles: int = CLAIM_SHUFFLES
    seed: int = 0
    named_families: bool = False
    exact: bool = False
    standard_errors: bool = False
    nulls: tuple[str, ...] = ("layer",)
    matched: str = "encoder"
    stem_seeds: tuple[int, ...] = ()
    first_sets: int = 0
    extended_sets: int = 0
    exact_sets: str = ""
    verdict_rules: dict = field(default_factory=lambda: dict(VERDICT_RULES), compare=False, repr=False)
    tests: str = field(default=TESTS, compare=False, repr=False)

    @property
    def floor(self) -> float:
        """The smallest p of ``shuffles`` shuffles: ``1 / (shuffles + 1)``."""
        return 1 / (self.shuffles + 1)

    def family(self, own: str, decides: bool = True) -> str:
        """The Holm family of a test: ``own`` (the family its claim names), except that under named families
        a test no verdict reads goes to :data:`DESCRIPTIVE` (with ``own`` after it, so that kinds stay apart)."""
        if self.named_families and not decides and not own.startswith(DESCRIPTIVE):
            return f"{DESCRIPTIVE} {own}".strip()
        return own


ROUND2 = Rules("round2", "docs/ewt-study/rules.md")
ROUND3_SHUFFLES = 100_000  # rules-round3.md: the shuffle nulls' draws
ROUND3_SEED = 20261129     # rules-round3.md: the Monte Carlo seed
ROUND3_TESTS = (
    "Tests (docs/ewt-study/rules-round3.md): Welch's t-test over seeds (two-sided unless a rule says one-sided) "
    f"for scores, with at least {MIN_SEEDS} seeds a group (fewer: *too few seeds to test*). Each verdict's "
    "Holm-Bonferroni family is exactly the tests it reads; every other test is *descriptive*, adjusted in a family "
    "of its kind. Exact tests where they exist: the global null of a kept-set Jaccard is hypergeometric. "
    f"Elsewhere Monte Carlo p = (1 + hits) / (1 + n) from numpy seed {ROUND3_SEED}: shuffle nulls draw "
    f"{ROUND3_SHUFFLES:,}; random head sets (claim 6) 250 per seed, 1,000 for a test whose Holm p lies within 2 "
    "standard errors of 0.05 (a test still within them is *not resolved* and counts as not significant); each "
    "Monte Carlo p is printed with its standard error (`± SE`, times its Holm factor for the adjusted p). "
    "Where a null is global and layer-aware the verdict reads the larger p. A draw within 1e-9 of the observed "
    "statistic counts as a hit. Amendment 1 (docs/ewt-study/rules-round3-amendment-1.md), written after the "
    "records it touches were seen: where every set a claim-6 null can draw has been scored in each seed pooled, the "
    "test's p is read from that null's exact law, P(random drop >= observed), with no standard error, and its floor "
    "is that law's; the Monte Carlo reading of the rules as first written is shown beside. `p raw, Holm adjusted`; "
    "significant: adjusted p < "
    f"{ALPHA}. Stability: each verdict recomputed with each seed left out in turn: *stable* when none changes "
    "it, *fragile* (with the seed) when one does, *too few seeds to test* only when what is left has a t-test "
    f"with fewer than {MIN_SEEDS} values a group or a family whose smallest attainable adjusted p reaches "
    f"{ALPHA}. A setting that keeps at least {NEAR_ALL:.0%} of its heads (in most of its seeds) *did not prune*.")
ROUND3_VERDICT_RULES = {
    **VERDICT_RULES,
    "mtl": "one Holm family of the two-sided Welch tests of STL against MTL on the tasks trained under equal "
           "conditions (EWT: POS, DEP, CON, SRL); a task with a known confound (EWT's NER: another training "
           "split, another share of steps) is shown alone, unadjusted, not counted. Replicated when MTL loses "
           "on more than half of the counted tasks; partly when it loses on at least one and gains "
           "significantly on none; not replicated otherwise.",
    "overlap": "counted: pairs of single-task DP settings that both pruned; one test a pair, the kept-head "
               "Jaccard, whose p is the larger of the global null's (exact, hypergeometric) and the layer-aware "
               "null's; these tests alone form the verdict's Holm family. Replicated when every counted pair's "
               "Jaccard is significant, partly when some are, not replicated when none is; the gate "
               "correlations are a descriptive family, shown beside it.",
    "sp_dp": f"counted: settings whose SP and whose DP run matched but for the pruning (SP's whole schedule in one "
             f"run, decoders frozen in SP's epochs: rules-round3.md) both pruned in every seed. Per setting two "
             f"one-sided Welch tests over seeds, the verdict's Holm family: *fewer heads* (DP's heads kept below "
             f"SP's) and *not lower* (non-inferiority, margin {MARGIN:g} points on the test score; MTL: the mean "
             f"over its tasks). DP wins a setting when both are significant; it loses when SP keeps significantly "
             f"fewer heads or DP's score is significantly more than {MARGIN:g} below SP's (these two tests a "
             f"Holm family of their own, read for a loss only; the same-heads tests and the comparisons of other "
             f"DP runs with SP are descriptive). Replicated when DP wins every "
             f"counted setting, partly when some, not replicated when it wins none and loses every other; "
             f"inconclusive otherwise.",
    "needed": "held out: for each task T, DP's stem cells found without T (from the seeds that chose the ablated "
              "sets) ablated in T's unpruned runs (STL, and MTL scored on T), seeds pooled, against two nulls of "
              "random head sets: matched on layer, and matched on layer and on each head's importance for T "
              "within its layer (Michel et al. 2019; three bins a layer). One Holm family per (regime, method, "
              "null) over the (model, task) pairs; a (model, task) needs its held-out stem cells when zero and "
              "mean ablation are both significant against both nulls (an intersection-union test). Supported "
              "when more than half of the (model, task) pairs need them, partly supported when at least one "
              "does, not supported otherwise. The paper does not test this claim.",
}
ROUND3 = Rules("round3", "docs/ewt-study/rules-round3.md", shuffles=ROUND3_SHUFFLES, seed=ROUND3_SEED,
               named_families=True, exact=True, standard_errors=True, nulls=("layer", "importance"),
               matched="phases", stem_seeds=(1, 2, 3), first_sets=250, extended_sets=1000,
               exact_sets="docs/ewt-study/rules-round3-amendment-1.md", verdict_rules=ROUND3_VERDICT_RULES,
               tests=ROUND3_TESTS)
RULE_SETS = {rules.name: rules for rules in (ROUND2, ROUND3)}


def rules_named(name: object) -> Rules:
    """The round of :data:`RULE_SETS` a command's ``rules=`` names (None or empty: round 2's, the default); a
    ConfigError naming the key and the rounds otherwise."""
    name = str(name or ROUND2.name)
    if name not in RULE_SETS:
        raise ConfigError(f"config key 'rules': {name!r} is not one of {', '.join(RULE_SETS)}")
    return RULE_SETS[name]
