"""bench/run_all.py's summary: targets read from the benchmarks' markdown tables."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench import run_all
from bench.run_all import BENCHMARKS, Bench, Column, evaluate, supported, targets

TABLE = """\
| measure | jobq | beanstalkd | jobq / beanstalkd | target |
|---|---:|---:|---:|---|
| restart: first reply | 15.18 s | 1.49 s | 10.2x | <= 1.5 s |
| restart: RSS | 371 MiB | 131 MiB | 2.8x | <= 500 MB |
| replay | 0.16 s | | | correct, no crawl |

| case | records/s | ratio | target |
|---|---:|---:|---|
| batches | 1,778,793 | 0.54x | >= 0.5x raw buffered |
| read | 454,917 |  | >= 500,000 records/s |
"""


def test_targets_compare_the_cell_in_the_targets_unit() -> None:
    rows = targets(Bench("t", 3, "bench.x", [], [], "x.md"), TABLE)
    assert [(r.measure, r.result, r.ratio, r.met) for r in rows] == [
        ("restart: first reply", "15.18 s", "10.2x", False),
        ("restart: RSS", "371 MiB", "2.8x", True),  # 389 MB <= 500 MB
        ("batches", "0.54x", "0.54x", True),
        ("read", "454,917", "", False),  # the unit comes from the header
    ]


def test_units_convert_within_a_family() -> None:
    assert evaluate("< 50 ms", ["x", "0.049 s"], ["", ""]) == ("0.049 s", True)
    assert evaluate("<= 1 KiB", ["x", "1025 B"], ["", ""]) == ("1025 B", False)
    assert evaluate("≤ 1.03", ["x", "14.3 s", "1.04"], ["", "", ""]) == ("1.04", False)
    assert evaluate("recorded", ["x", "1"], ["", ""]) == ("", None)


def test_column_targets_apply_to_every_row() -> None:
    text = "| load | p99 ms |\n|---|---|\n| spread | 26.0 |\n| burst | 5733.9 |\n"
    bench = Bench(
        "s", 5, "bench.s", [], [], "s.md", columns=(Column("p99 ms", "<= 50 ms", "lag {row}"),)
    )
    assert [(r.measure, r.result, r.met) for r in targets(bench, text)] == [
        ("lag spread", "26.0 ms", True),
        ("lag burst", "5733.9 ms", False),
    ]


def test_options_a_module_lacks_are_dropped_with_their_values() -> None:
    kept, dropped = supported(["--rounds", "1", "--gone", "5", "--quick"], {"--rounds", "--quick"})
    assert kept == ["--rounds", "1", "--quick"] and dropped == ["--gone", "5"]


def test_every_benchmark_has_distinct_output_and_quick_arguments() -> None:
    assert len({b.out_name for b in BENCHMARKS}) == len(BENCHMARKS)
    # --quick never runs a full-size benchmark (those it never runs excepted)
    assert all(b.quick for b in BENCHMARKS if b.runs)


def test_a_benchmark_that_never_runs_is_collected_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    never = next(b for b in BENCHMARKS if not b.runs)
    monkeypatch.setattr(run_all, "OUT", tmp_path)
    monkeypatch.setattr(run_all, "run_one", _must_not_run)
    monkeypatch.setattr(run_all, "BENCHMARKS", [never])
    (tmp_path / never.out_name).write_text("| a | b |\n|---|---|\n| x | 1 |\n")
    out = tmp_path / "report.md"
    assert run_all.main(["--out", str(out)]) == 0
    assert f"## {never.title} (issue {never.issue})" in out.read_text()
    (tmp_path / never.out_name).unlink()
    assert run_all.main(["--out", str(out)]) == 0  # no table: left out, not a failure
    assert never.title not in out.read_text()


def _must_not_run(*args: object) -> None:
    raise AssertionError("run_all ran a benchmark it must only collect")
