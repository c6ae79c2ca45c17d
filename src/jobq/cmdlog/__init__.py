"""The command log: workq's segmented, CRC-checked, append-only log of bytes.

It knows records, segments, sync policies and cleaning, and nothing of jobs
(``jobq.cmdlog`` never imports ``jobq.engine``).
"""
