"""Gate pictures and tables from run folders (the library of ``python -m mtl_heads gates``,
whose command line is :mod:`mtl_heads.commands.gates`), in four rooms, floor by floor:

- :mod:`.stats`: gate statistics on ``[layers, heads]`` grids (movement, correlation, run-to-run
  consistency, the permutation baseline); numbers and tables only;
- :mod:`.survivors`: the heads kept in every setting (stem cells), the counts chance would give, and their
  ranks among probe heads;
- :mod:`.read`: run folders and probe report folders read and grouped into settings;
- :mod:`.pictures`: the PNG and CSV files of the report, and their W&B logging.

Every public name of the four is importable from here (``from mtl_heads.reports.gates import stem_cells``).

What the report holds:

Reads the ``gates.json`` and ``config.yaml`` of finished runs (run folders, globs, or folders with runs
at any depth below them), groups the runs into *settings* as ``python -m mtl_heads compare`` does
(configs equal apart from seed, folders and W&B; named ``dep``, ``pos+ner``, ``pos (dynamic, budget=36)``;
the seeds of one setting form one group) and writes, as PNG and CSV (:func:`write_report`; the findings it
looks for are He & Choi 2021's):

- ``gates-<setting>-seed<seed>.png``: the layer x head gate map of every run, with its kept count;
- ``overlap-<setting>.png``: three runs of a setting (the first three by seed) as the R, G, B
  channels of one image, channel ``c = 255 * (1 - gate of run c)``: black = kept in all three;
- ``mean-gates.png``: ``255 * (1 - mean gate)`` over every run given (all tasks), black = always kept;
- ``correlation.csv`` / ``.png``: Pearson correlation between the settings' mean gate vectors, with
  run-to-run consistency (mean pairwise Pearson of its runs) on the diagonal, only where it means
  something: settings whose gates never moved (:func:`gates_moved`: unpruned, all near 1, or still
  within their initial range) are blank in the CSV and left out of the picture, and the diagonal
  needs two runs whose gates moved;
- ``correlation-permutation.csv``: a permutation baseline for each pair of those settings
  (:func:`permutation_baseline`): do they keep the same heads more than chance, given how many heads
  each keeps? The observed correlation of their mean gates, and the Jaccard overlap of their kept
  heads, against the same values with one setting's head positions shuffled;
- ``kept-per-layer.csv`` and ``kept-<setting>.png``: heads kept per layer (gate >= threshold);
- ``stem-cells.csv`` (:func:`stem_cells`): per head, how many settings (whose gates moved) and runs keep
  it; the heads kept in every setting are the *stem cells* (He & Choi 2021), held against the count
  expected if each setting kept its number of heads at random (:func:`chance_stem_cells`);
- ``stem-cells-probes.csv`` (:func:`stem_cells_vs_probes`, with probe report folders): are the stem
  cells among the best heads of the (pretrained) encoder's probes? Their percentile ranks per probe,
  against random head sets of the same size.

A head counts as kept when its gate is at least :data:`mtl_heads.model.gating.KEPT_AT` (1e-3).
"""
from __future__ import annotations

from mtl_heads.figures.gate_map import kept_per_layer, plot_gate_map
from mtl_heads.reports.gates.pictures import (WANDB_MODES, WHAT, correlation_note, default_out, describe_file,
                                              grey_mean, group_size, log_to_wandb, plot_correlation, plot_kept_bars,
                                              plot_pixels, rgb_overlap, write_correlation, write_kept, write_overlap,
                                              write_report, write_stem_cells)
from mtl_heads.reports.gates.read import (RunGates, group_settings, moved_flags, read_probe_reports, read_run,
                                          read_runs)
from mtl_heads.reports.gates.stats import (BASELINE_SHUFFLES, DIAGONAL_TEXT, MIN_GATE_SPREAD, PERMUTATION_TEXT,
                                           STILL_TEXT, correlation_matrix, gates_moved, gates_vary, initial_gate_range,
                                           jaccard, kept_heads, pearson_matrix, permutation_baseline, permutation_lines,
                                           run_consistency, still_settings)
from mtl_heads.reports.gates.survivors import (DRAWS, NOT_RANKED, PROBE_RANK_TEXT, ROLE_LABELS, STEM_TEXT,
                                               chance_stem_cells, chance_stem_cells_by_layer, check_probe_grid,
                                               head_ranks, head_skill, kept_by_layer, percentile_ranks, probe_rank_lines,
                                               set_percentile_baseline, skill_labels, stem_cell_lines, stem_cells,
                                               stem_cells_vs_probes, stem_count_layer_p, stem_count_p, stem_settings)
from mtl_heads.folders import is_gate_run


__all__ = ["MIN_GATE_SPREAD", "RunGates", "rgb_overlap", "grey_mean", "pearson_matrix",
           "gates_vary", "initial_gate_range", "gates_moved", "moved_flags", "run_consistency", "correlation_matrix",
           "still_settings", "correlation_note", "BASELINE_SHUFFLES", "PERMUTATION_TEXT", "STILL_TEXT", "DIAGONAL_TEXT",
           "kept_heads", "jaccard", "permutation_baseline", "permutation_lines", "STEM_TEXT", "DRAWS", "NOT_RANKED",
           "ROLE_LABELS", "PROBE_RANK_TEXT", "stem_cells", "stem_settings", "chance_stem_cells", "stem_count_p",
           "chance_stem_cells_by_layer", "stem_count_layer_p", "kept_by_layer", "stem_cell_lines",
           "read_probe_reports", "skill_labels", "head_skill", "percentile_ranks", "head_ranks",
           "set_percentile_baseline", "check_probe_grid", "stem_cells_vs_probes", "probe_rank_lines",
           "write_stem_cells", "kept_per_layer", "is_gate_run", "read_run", "read_runs", "group_settings",
           "plot_gate_map", "plot_pixels", "plot_correlation", "plot_kept_bars", "write_overlap", "write_correlation",
           "write_kept", "write_report", "WANDB_MODES", "log_to_wandb", "default_out", "group_size", "WHAT",
           "describe_file"]
