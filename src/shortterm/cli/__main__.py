"""``python -m shortterm.cli``: the same command as ``shortterm``."""

from . import main

main()
