"""The jobq server: the workq protocol over TCP, the core that runs commands through the
engine and the log, engine snapshots, and start-up.
"""
