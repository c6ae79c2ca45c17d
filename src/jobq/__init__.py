"""jobq: a durable job server and scheduler for Spark data pipelines, compatible with workq."""

__version__ = "0.1.0"
