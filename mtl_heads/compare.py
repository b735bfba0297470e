"""``python -m mtl_heads.compare``: the same as ``python -m mtl_heads compare`` (:mod:`mtl_heads.commands.compare`)."""

if __name__ == "__main__":
    import sys

    from mtl_heads.commands.compare import main

    sys.exit(main())
