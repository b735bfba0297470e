"""``python -m mtl_heads.predict``: the same as ``python -m mtl_heads predict`` (:mod:`mtl_heads.commands.predict`)."""

if __name__ == "__main__":
    import sys

    from mtl_heads.commands.predict import main

    sys.exit(main())
