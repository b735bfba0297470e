"""Figures drawn from numbers given to them, reading no file: below both training, which logs a run's gate
map to W&B each epoch, and the reports, which draw it and their other figures, so that neither training
nor the reports imports the other.

- :mod:`~mtl_heads.figures.plots`: what the figures share (a figure without pyplot, label wrapping, sizes);
- :mod:`~mtl_heads.figures.gate_map`: one run's gate map (heads kept per layer, the layer x head axes).

matplotlib is imported when a figure is made, not with these modules.
"""
