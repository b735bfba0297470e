"""The rules every claim is held to, fixed before any number is read: the verdicts' definitions
(:data:`VERDICT_RULES`), the statistics all claims share (:data:`TESTS`, with the numbers it names), and the
words a verdict is written in. ``docs/ewt-study/rules.md`` says the same in full; changing a rule after
the runs it judges is what tests/test_published.py's rules-commit check catches."""
from __future__ import annotations

from mtl_heads.reports.significance import ALPHA

__all__ = ["ALPHA", "NEAR_ALL", "CLAIM_SHUFFLES", "FLOOR", "MIN_SEEDS", "MARGIN", "VERDICT_METHODS", "TOO_FEW", "TESTS",
           "VERDICT_RULES", "MATCHED_RULE", "REPLICATION", "SUPPORT"]

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
