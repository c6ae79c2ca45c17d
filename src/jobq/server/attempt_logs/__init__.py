"""Attempt logs: what each attempt of a job logged and printed, shipped by its worker in
batches and kept outside the command log, per job and attempt, capped, for as long as the
job (``store.py``; docs/worker.md, "Attempt logs"). ``capped.py`` holds the cap and the
in-memory logs, ``files.py`` the files under the data directory."""

from jobq.server.attempt_logs.store import AttemptLogs, AttemptNotFound

__all__ = ["AttemptLogs", "AttemptNotFound"]
