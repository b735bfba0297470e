"""The style sheets and scripts that the HTML pages inline (nothing is fetched when a page opens).

- ``page.css``, ``page.js``: every page of ``python -m mtl_heads report`` (:mod:`mtl_heads.reports.page`):
  sortable tables, heatmaps drawn from their ``data-heat`` numbers, filter boxes;
- ``study.css``, ``study.js``: the claims and figures that open a study's page
  (:mod:`mtl_heads.study.lead`): the claims list, the figures' tabs;
- ``attention.css``, ``attention.js``: the attention view (:mod:`mtl_heads.reports.attention_view`).

They ship with the package (``[tool.setuptools.package-data]`` in pyproject.toml) and are read with
:mod:`importlib.resources`, so an installed wheel finds them as a source checkout does.
"""
from __future__ import annotations

from importlib.resources import files

__all__ = ["asset"]


def asset(name: str) -> str:
    """The text of the file ``name`` of this folder (e.g. ``page.css``), read as UTF-8."""
    return files(__name__).joinpath(name).read_text(encoding="utf-8")
