"""``python -m jobq``: the command line."""

from jobq.cli import main

main()
