"""``python -m mtl_heads.report``: the same as ``python -m mtl_heads report`` (:mod:`mtl_heads.commands.report`)."""

if __name__ == "__main__":
    import sys

    from mtl_heads.commands.report import main

    sys.exit(main())
