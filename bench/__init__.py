"""jobq benchmarks (run from the repository root, e.g. ``python -m bench.bench_e2e``)."""
