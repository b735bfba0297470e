"""The commands: thin layers over the library, one module each, every one with ``main(argv) -> int``.

Run as ``python -m mtl_heads <command> [PATHS...] [key=value ...]`` (or ``mtl-heads <command>``);
``python -m mtl_heads.<command>`` works too. Every command takes ``key=value`` (its keys and defaults:
``configs/<command>.yaml``, printed by ``-h``) and paths as positional arguments. The library never
imports this package.
"""

# command: (module holding main(argv), what it does in one line); a plain dict, in the order of a study
COMMANDS = {
    "train": ("mtl_heads.commands.train", "train a gated single- or multi-task model (one run per seed)"),
    "reproduce": ("mtl_heads.commands.reproduce", "train a run's record again and say whether its weights come out the same"),
    "evaluate": ("mtl_heads.commands.evaluate", "score a trained model on a corpus, or a prediction file against gold"),
    "predict": ("mtl_heads.commands.predict", "annotate new text with a trained model, or one with its heads removed"),
    "remove": ("mtl_heads.commands.remove", "remove a run's closed heads for real and save the smaller model"),
    "probe": ("mtl_heads.commands.probe", "parameter-free head probes of a model, or a comparison of probe reports"),
    "ablate": ("mtl_heads.commands.ablate", "causal head ablation of a trained run against random head sets"),
    "compare": ("mtl_heads.commands.compare", "one table of many runs, seeds pooled, with plots and significance"),
    "gates": ("mtl_heads.commands.gates", "gate pictures and tables (PNG, CSV) from run folders, and the stem cells"),
    "report": ("mtl_heads.commands.report", "one self-contained HTML page of runs, gates and probe reports"),
    "claims": ("mtl_heads.commands.claims", "He & Choi's claims checked on a study's runs, one line each"),
    "ewt": ("mtl_heads.commands.ewt", "build the five-layer EWT corpus that data=ewt reads"),
}
