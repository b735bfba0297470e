"""``python -m mtl_heads.train``: the same as ``python -m mtl_heads train`` (:mod:`mtl_heads.commands.train`)."""

if __name__ == "__main__":
    import sys

    from mtl_heads.commands.train import main

    sys.exit(main())
