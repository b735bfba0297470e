"""Reports on run folders: the library behind ``python -m mtl_heads compare``, ``python -m
mtl_heads report`` and ``python -m mtl_heads gates`` (their command lines are in
:mod:`mtl_heads.commands`; nothing here imports a command), and probe reports: probes compute, reports show.

Imports run one way, each module using only those above it; the figures they draw share
:mod:`mtl_heads.figures` (a figure without pyplot, label sizes, one run's gate map), a floor below:

- :mod:`~mtl_heads.records.runs`: finding run folders, reading their config, settings and their names;
- :mod:`~mtl_heads.reports.probe_report`: a probe report folder (``python -m mtl_heads probe``): writing, reading;
- :mod:`~mtl_heads.reports.gate_report`: gate pictures and tables of runs (maps, overlaps, correlation and its
  permutation baseline, kept per layer);
- :mod:`~mtl_heads.reports.curves`: dev learning curves, per setting and task, seeds pooled;
- :mod:`~mtl_heads.reports.significance`: tests of a difference between two settings over seeds;
- :mod:`~mtl_heads.reports.probe_compare`: probe reports side by side, seeds pooled;
- :mod:`~mtl_heads.reports.comparison`: the comparison table of runs, seeds pooled, and its figures;
- :mod:`~mtl_heads.reports.page`: the self-contained HTML page of all of it and of probe reports.
"""
