"""``python -m mtl_heads.evaluate``: the same as ``python -m mtl_heads evaluate`` (:mod:`mtl_heads.commands.evaluate`)."""

if __name__ == "__main__":
    import sys

    from mtl_heads.commands.evaluate import main

    sys.exit(main())
