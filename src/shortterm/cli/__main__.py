"""``python -m shortterm.cli``: the same command as ``shortterm``."""

from .app import main

main()
