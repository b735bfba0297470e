"""``python -m mtl_heads.prune``: the same as ``python -m mtl_heads prune`` (:mod:`mtl_heads.commands.prune`)."""

if __name__ == "__main__":
    import sys

    from mtl_heads.commands.prune import main

    sys.exit(main())
