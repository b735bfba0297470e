"""``python -m mtl_heads.claims``: the same as ``python -m mtl_heads claims`` (:mod:`mtl_heads.commands.claims`)."""

if __name__ == "__main__":
    import sys

    from mtl_heads.commands.claims import main

    sys.exit(main())
