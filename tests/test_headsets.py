"""Head sets and the layer-aware nulls, checked against brute-force enumeration on small grids."""
import itertools
import math

import numpy as np
import pytest

from mtl_heads.model import headsets
from mtl_heads import gates


def test_names_round_trip():
    assert headsets.head_name(2, 11) == "L2H11" and headsets.parse_head(" l2h11 ") == (2, 11)
    grid = np.zeros((2, 3), bool)
    grid[0, 2] = grid[1, 0] = True
    assert headsets.head_names(grid) == ["L0H2", "L1H0"]
    with pytest.raises(ValueError, match="not a head name"):
        headsets.parse_head("layer 2")


def test_layer_permutations_stay_in_their_layer():
    order = headsets.layer_permutations(np.random.default_rng(0), 200, 3, 4)  # [200, 12]
    assert (np.sort(order, axis=1) == np.arange(12)).all()  # permutations
    assert ((order // 4) == np.repeat(np.arange(3), 4)).all()  # position p holds a head of p's layer
    blocks = headsets.layer_permutations(np.random.default_rng(0), 50, 2, 4, block=2).reshape(50, 4, 2)
    assert (blocks[..., 1] == blocks[..., 0] + 1).all() and (blocks[..., 0] % 2 == 0).all()  # whole KV groups


def test_seeded_permutations_are_what_a_fresh_generator_draws_kept_read_only():
    """The memoised draws equal block_permutations and layer_permutations drawn one after another from
    default_rng(seed); they are read-only (a caller cannot change what the next one reads), and the same
    arguments give the same arrays without drawing again."""
    rng = np.random.default_rng(7)
    expected = [headsets.block_permutations(rng, 30, 12, 2), headsets.layer_permutations(rng, 30, 3, 4, 2)]
    got = headsets.seeded_permutations(7, 30, 3, 4, 2, ("global", "layer"))
    assert [g.tolist() for g in got] == [e.tolist() for e in expected] and got[0].dtype == np.uint8
    assert headsets.seeded_permutations(7, 30, 3, 4, 2, ("global", "layer"))[1] is got[1]
    with pytest.raises(ValueError, match="read-only"):
        got[0][0, 0] = 1
    chosen = np.array([[1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]], bool)
    order = headsets.seeded_permutations(3, 20, 3, 4, 1, ("layer",))[0]
    assert (headsets.layer_matched_from(order, chosen) ==
            headsets.layer_matched_sets(np.random.default_rng(3), 20, chosen)).all()
    with pytest.raises(ValueError, match="'global' or 'layer'"):
        headsets.seeded_permutations(3, 20, 3, 4, 1, ("cells",))


def test_layer_matched_sets_keep_the_counts():
    chosen = np.array([[1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]], bool)
    sets = headsets.layer_matched_sets(np.random.default_rng(1), 500, chosen)  # [500, 3]
    assert sets.shape == (500, 3)
    layers = np.sort(sets // 4, axis=1)
    assert (layers == [0, 0, 2]).all() and all(len(set(s)) == 3 for s in sets)
    # every pair of layer 0 comes up, about equally often (6 pairs)
    pairs = {tuple(sorted(s[:2])) for s in sets}
    assert pairs == set(itertools.combinations(range(4), 2))
    again = headsets.layer_matched_sets(np.random.default_rng(1), 500, chosen)
    assert (again == sets).all()  # seeded
    full = np.array([[1, 1], [0, 0]], bool)  # all of layer 0 chosen: the null cannot vary there
    assert (np.sort(headsets.layer_matched_sets(np.random.default_rng(0), 5, full), axis=1) == [0, 1]).all()
    kv = headsets.layer_matched_sets(np.random.default_rng(0), 100, np.array([[1, 1, 0, 0]], bool), block=2)
    assert set(map(tuple, np.sort(kv, axis=1))) == {(0, 1), (2, 3)}


def _exact_layer_overlap_p(kept: list[list[int]], heads: int, observed: int) -> float:
    """P(at least ``observed`` heads kept by both of two settings) when each keeps its count per layer at
    random: per layer the overlap is hypergeometric; layers are independent, so their sum convolves."""
    from scipy.stats import hypergeom

    total = np.array([1.0])
    for a, b in zip(*kept):
        pmf = hypergeom(heads, a, b).pmf(np.arange(min(a, b) + 1))
        total = np.convolve(total, pmf)
    return float(total[observed:].sum())


def test_layer_aware_stem_count_matches_the_exact_distribution():
    kept = [[3, 1, 0], [2, 2, 1]]  # two settings, heads kept in each of 3 layers of 4 heads
    # expected: 4 * (3/4 * 2/4) + 4 * (1/4 * 2/4) + 4 * 0 = 1.5 + 0.5
    assert gates.chance_stem_cells_by_layer(np.array(kept), 4) == pytest.approx(2.0)
    for observed in (1, 2, 3):
        exact = _exact_layer_overlap_p(kept, 4, observed)
        p = gates.stem_count_layer_p(np.array(kept), 4, observed, draws=40_000)
        assert p == pytest.approx(exact, abs=0.01)
    # the layer-aware null gives more overlap than the global one when both keep the same layers
    same = np.array([[4, 0, 0], [4, 0, 0]])
    assert gates.chance_stem_cells_by_layer(same, 4) == 4.0 > gates.chance_stem_cells([4, 4], 12)
    assert gates.stem_count_layer_p(same, 4, 4) == 1.0  # always the same 4
    assert math.isnan(gates.stem_count_layer_p(np.zeros((0, 3)), 4, 1))


def test_layer_aware_permutation_baseline_matches_enumeration():
    """2 layers x 3 heads: every within-layer shuffle of B (3! * 3! = 36) enumerated by hand."""
    rng = np.random.default_rng(3)
    a, b = rng.random((2, 3)), rng.random((2, 3))
    table = gates.permutation_baseline({"a": [a], "b": [b]}, {"a": [True], "b": [True]}, shuffles=20_000)
    row = table.iloc[0]
    x, y = a.ravel(), b.ravel()
    observed = np.corrcoef(x, y)[0, 1]
    nulls = [np.corrcoef(x, np.concatenate([y[:3][list(p)], y[3:][list(q)]]))[0, 1]
             for p in itertools.permutations(range(3)) for q in itertools.permutations(range(3))]
    assert row["correlation"] == pytest.approx(observed)
    assert row["layer null mean"] == pytest.approx(np.mean(nulls), abs=0.01)
    assert row["layer p"] == pytest.approx(np.mean(np.array(nulls) >= observed - 1e-12), abs=0.01)


def test_jaccard_of_a_setting_that_keeps_every_head_cannot_be_tested():
    every, some = np.ones((2, 3)), np.array([[1.0, 0, 0], [0, 1.0, 0]])
    row = gates.permutation_baseline({"all": [every * 0.9], "some": [some]},
                                           {"all": [True], "some": [True]}).iloc[0]
    assert row["jaccard note"] == "cannot be tested: all keeps every head"
    assert math.isnan(row["jaccard p"]) and math.isnan(row["jaccard layer p"])


def test_layer_matched_percentile_baseline():
    # the best head of each layer chosen: against any heads it is special, against its own layer's
    # heads too; the worst heads of the best layer are not special once layers are matched
    skill = np.array([[90, 80, 70], [10, 5, 1]], float)
    percent = gates.percentile_ranks(skill).ravel()
    chosen = np.array([[0, 1, 1], [0, 0, 0]], bool).ravel()  # layer 0's two weaker heads
    _, _, _, p_global = gates.set_percentile_baseline(percent, chosen, draws=20_000)
    observed, mean, _, p_layer = gates.set_percentile_baseline(percent, chosen, draws=20_000, layers=2)
    # percentiles 100, 80, 60 | 40, 20, 0; the chosen mean 70. Global: C(6, 2) = 15 sets, 4 with a mean
    # of at least 70 (100+80, 100+60, 100+40, 80+60): p = 4/15
    assert observed == 70 and p_global == pytest.approx(4 / 15, abs=0.01)
    # within layer 0: C(3, 2) = 3 sets, means 90, 80, 70, every one at least as high: p = 1
    assert p_layer == pytest.approx(1.0, abs=0.001) and mean == pytest.approx(80, abs=0.5)


def test_cell_matched_sets_keep_each_cells_count_and_draw_every_head_of_a_cell():
    from mtl_heads.model.headsets import cell_matched_sets, importance_cells

    importance = np.array([[0.1, 0.9, 0.5, 0.3, 0.7, 0.2], [5.0, 1.0, 3.0, 2.0, 6.0, 4.0]])  # [2 layers, 6 heads]
    cells = importance_cells(importance, bins=3)
    # layer 0 by importance: H0 0.1, H5 0.2 (bin 0), H3 0.3, H2 0.5 (bin 1), H4 0.7, H1 0.9 (bin 2)
    assert cells.tolist() == [[0, 2, 1, 1, 2, 0], [5, 3, 4, 3, 5, 4]]
    chosen = np.zeros((2, 6), dtype=bool)
    chosen[0, 1] = chosen[0, 3] = chosen[1, 4] = True  # cells 2, 1, 5
    sets = cell_matched_sets(np.random.default_rng(0), 2000, chosen, cells)
    assert sets.shape == (2000, 3)
    flat = cells.ravel()
    for row in sets[:50]:
        assert sorted(flat[row].tolist()) == [1, 2, 5] and len(set(row.tolist())) == 3
    # uniform within a cell: each of cell 2's heads (L0H1, L0H4) drawn about half the time
    share = np.mean(np.isin(sets, [1]).any(axis=1))
    assert 0.45 < share < 0.55
    with pytest.raises(ValueError, match="bins"):
        importance_cells(importance, bins=7)


def test_possible_sets_count_the_nulls_own_space():
    """Layer-matched: C(heads, k) per layer; cell-matched: C(cell's heads, k) per cell, as many as the distinct
    sets cell_matched_sets draws; 1 where every cell touched is held whole."""
    from mtl_heads.model.headsets import cell_matched_sets, possible_sets

    cells = np.repeat(np.arange(2)[:, None] * 3, 12, axis=1) + np.tile(np.repeat(np.arange(3), 4), (2, 1))  # 4 a cell
    chosen = np.zeros((2, 12), dtype=bool)
    chosen[0, [0, 4, 5]] = chosen[1, [11]] = True  # cells 0 (1 of 4), 1 (2 of 4), 5 (1 of 4)
    assert possible_sets(chosen) == math.comb(12, 3) * 12
    assert possible_sets(chosen, cells=cells) == 4 * 6 * 4
    drawn = {tuple(sorted(r)) for r in cell_matched_sets(np.random.default_rng(0), 5000, chosen, cells).tolist()}
    assert len(drawn) == 4 * 6 * 4
    assert possible_sets(np.isin(cells, [0, 5]), cells=cells) == 1
    with pytest.raises(ValueError, match="block 1"):
        possible_sets(chosen, 2, cells)


def _orders_law(grids, cells, streams):
    """The law of cell_matched_sets' joint draw by brute force: every order of every stream's heads, each
    equally likely, each grid's set read by cell_matched_sets itself from that order."""
    from collections import Counter
    from mtl_heads.model.headsets import cell_matched_sets

    class Row:  # a generator whose one row of uniforms is the given order
        def __init__(self, uniforms):
            self.uniforms = uniforms

        def random(self, shape):
            return self.uniforms[None, :]

    size, ids = grids[0].size, sorted(set(streams))
    count, total = Counter(), 0
    for orders in itertools.product(*[list(itertools.permutations(range(size))) for _ in ids]):
        sets = []
        for grid, cell, stream in zip(grids, cells, streams):
            uniforms = np.empty(size)
            uniforms[list(orders[ids.index(stream)])] = np.arange(size)
            sets.append(tuple(sorted(cell_matched_sets(Row(uniforms), 1, grid, cell)[0].tolist())))
        count[tuple(sets)] += 1
        total += 1
    return {sets: n / total for sets, n in count.items()}


@pytest.mark.parametrize("streams", [(0, 0), (0, 1), (7, 7, 7)])
def test_cell_matched_law_is_every_order_of_the_heads_counted(streams):
    """The exact joint law of several grids' draws (one row of uniforms per stream), against every order of the
    heads: grids of one stream share their draw (their sets are tied), grids of two streams are independent."""
    from mtl_heads.model.headsets import cell_matched_law

    one = [np.array([[0, 0, 1, 1], [2, 2, 2, 3]]), np.array([[5, 6, 6, 5], [7, 8, 8, 8]]), np.array([[1, 1, 1, 1], [2, 2, 3, 3]])]
    grids = [np.array([[1, 0, 1, 0], [1, 1, 0, 1]], bool), np.array([[1, 1, 0, 0], [1, 1, 0, 0]], bool),
             np.array([[0, 1, 0, 1], [0, 1, 0, 1]], bool)]
    n = len(streams)
    if len(set(streams)) == 2:  # two streams of 8 heads: 8!^2 orders is too many; 2 x 2 heads a stream
        one = [np.array([[0, 0], [1, 1]]), np.array([[4, 5], [5, 5]])]
        grids = [np.array([[1, 0], [0, 1]], bool), np.array([[1, 0], [1, 1]], bool)]
    law = dict(cell_matched_law(grids[:n], one[:n], streams))
    brute = _orders_law(grids[:n], one[:n], streams)
    assert set(law) == set(brute) and max(abs(law[k] - brute[k]) for k in brute) < 1e-12
    assert sum(law.values()) == pytest.approx(1.0)
    if len(set(streams)) == 2:  # independent streams: the joint law is the product of each grid's own
        alone = [dict(cell_matched_law([g], [c])) for g, c in zip(grids, one)]
        assert all(law[sets] == pytest.approx(alone[0][(sets[0],)] * alone[1][(sets[1],)]) for sets in law)


def test_cell_matched_law_is_what_the_draws_show_on_a_model_sized_grid():
    """On a 6 x 12 grid with importance cells of 4 heads, two grids of one stream: the law's probabilities are the
    draws' shares (200,000 draws of cell_matched_sets), and a law too large to enumerate says so (None)."""
    from mtl_heads.model.headsets import cell_matched_law, cell_matched_sets, importance_cells

    rng = np.random.default_rng(5)
    cells = [importance_cells(rng.random((6, 12))) for _ in range(2)]
    chosen = np.zeros((6, 12), dtype=bool)
    chosen[0, [2, 5]] = chosen[1, [4, 8, 9]] = chosen[2, 8] = True
    law = cell_matched_law([chosen, chosen], cells)
    draws = 200_000
    seen = {}
    both = [np.sort(cell_matched_sets(np.random.default_rng(0), draws, chosen, c), axis=1) for c in cells]
    for row in zip(map(tuple, both[0].tolist()), map(tuple, both[1].tolist())):
        seen[row] = seen.get(row, 0) + 1
    assert set(seen) <= {sets for sets, _ in law}
    for sets, p in law:
        if p * draws >= 20:  # the joint draws seen often enough for a normal approximation
            assert abs(seen.get(sets, 0) / draws - p) < 5 * math.sqrt(p * (1 - p) / draws)
    by_first = {}  # one grid's own law, summed over the other's sets, against every draw
    for (first, _), p in law:
        by_first[first] = by_first.get(first, 0.0) + p
    firsts = {}
    for row in map(tuple, both[0].tolist()):
        firsts[row] = firsts.get(row, 0) + 1
    for first, p in by_first.items():
        assert abs(firsts.get(first, 0) / draws - p) < 5 * math.sqrt(p * (1 - p) / draws) + 1e-9
    everywhere = np.zeros((6, 12), dtype=bool)
    everywhere[:, ::2] = True  # 2 of 4 heads in every cell: 6^18 joint draws
    assert cell_matched_law([everywhere, everywhere], cells, limit=1_000_000) is None
