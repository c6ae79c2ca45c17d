"""``python -m jobq``: the command line (a server command on the system allocator: entry.py)."""

from jobq.entry import main

main()
