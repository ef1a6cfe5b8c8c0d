"""``python -m shortterm``: the same command as ``shortterm`` (``shortterm.cli:main``)."""

from .cli import main

if __name__ == "__main__":
    main()
