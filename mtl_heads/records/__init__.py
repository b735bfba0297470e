"""What the project's commands wrote, read back into tables: run folders (:mod:`.runs`, the run table that
``compare``, ``report``, ``gates`` and ``claims`` read) and probe report folders (:mod:`.probe_reports`). What
each folder holds and how it is named is :mod:`mtl_heads.folders`; what the gates of runs say,
:mod:`mtl_heads.gates`; drawing and writing them, :mod:`mtl_heads.reports`."""
