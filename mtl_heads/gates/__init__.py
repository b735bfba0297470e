"""What the learnt gates of runs say (the numbers of ``python -m mtl_heads gates`` and of the claims, which
:mod:`mtl_heads.reports.gate_report` draws and writes), in three rooms, floor by floor:

- :mod:`.grids`: gate statistics on ``[layers, heads]`` grids (movement, correlation, run-to-run
  consistency, the permutation baseline); numbers and tables only;
- :mod:`.survivors`: the heads kept in every setting (stem cells), the counts chance would give, and their
  ranks among probe heads;
- :mod:`.read`: run folders and probe report folders read and grouped into settings.

Every public name of the three is importable from here (``from mtl_heads.gates import stem_cells``).
A head counts as kept when its gate is at least :data:`mtl_heads.model.gate_constants.KEPT_AT` (1e-3).
"""
from __future__ import annotations

from mtl_heads.gates.read import (RunGates, group_settings, moved_flags, read_probe_reports, read_run, read_runs)
from mtl_heads.gates.grids import (BASELINE_SHUFFLES, DIAGONAL_TEXT, MIN_GATE_SPREAD, PERMUTATION_TEXT, STILL_TEXT,
                                   correlation_matrix, gates_moved, gates_vary, initial_gate_range, jaccard,
                                   kept_heads, pearson_matrix, permutation_baseline, permutation_lines,
                                   run_consistency, still_settings)
from mtl_heads.gates.survivors import (DRAWS, NOT_RANKED, PROBE_RANK_TEXT, ROLE_LABELS, STEM_TEXT, chance_stem_cells,
                                       chance_stem_cells_by_layer, check_probe_grid, head_ranks, head_skill,
                                       kept_by_layer, percentile_ranks, probe_rank_lines, set_percentile_baseline,
                                       skill_labels, stem_cell_lines, stem_cells, stem_cells_vs_probes,
                                       stem_count_layer_p, stem_count_p, stem_settings)
from mtl_heads.folders import is_gate_run


__all__ = ["MIN_GATE_SPREAD", "RunGates", "pearson_matrix", "gates_vary", "initial_gate_range", "gates_moved",
           "moved_flags", "run_consistency", "correlation_matrix", "still_settings", "BASELINE_SHUFFLES",
           "PERMUTATION_TEXT", "STILL_TEXT", "DIAGONAL_TEXT", "kept_heads", "jaccard", "permutation_baseline",
           "permutation_lines", "STEM_TEXT", "DRAWS", "NOT_RANKED", "ROLE_LABELS", "PROBE_RANK_TEXT", "stem_cells",
           "stem_settings", "chance_stem_cells", "stem_count_p", "chance_stem_cells_by_layer", "stem_count_layer_p",
           "kept_by_layer", "stem_cell_lines", "read_probe_reports", "skill_labels", "head_skill",
           "percentile_ranks", "head_ranks", "set_percentile_baseline", "check_probe_grid", "stem_cells_vs_probes",
           "probe_rank_lines", "is_gate_run", "read_run", "read_runs", "group_settings"]
