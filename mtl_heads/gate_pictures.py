"""``python -m mtl_heads.gate_pictures``: the same as ``python -m mtl_heads gates`` (:mod:`mtl_heads.commands.gates`)."""

if __name__ == "__main__":
    import sys

    from mtl_heads.commands.gates import main

    sys.exit(main())
