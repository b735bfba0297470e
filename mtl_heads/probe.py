"""``python -m mtl_heads.probe``: the same as ``python -m mtl_heads probe`` (:mod:`mtl_heads.commands.probe`)."""

if __name__ == "__main__":
    import sys

    from mtl_heads.commands.probe import main

    sys.exit(main())
