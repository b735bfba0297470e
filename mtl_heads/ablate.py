"""``python -m mtl_heads.ablate``: the same as ``python -m mtl_heads ablate`` (:mod:`mtl_heads.commands.ablate`)."""

if __name__ == "__main__":
    import sys

    from mtl_heads.commands.ablate import main

    sys.exit(main())
