#!/bin/sh
# `make test`'s suite in two pytest processes at once, then the fault suite alone.
#
# Most tests wait (for a server or worker subprocess, Spark's JVM, a socket) more than they
# compute: one pytest process keeps about half of two cores busy. So tests/spark runs in
# the background (its JVM jobs are long and not timed) while the rest but the fault suite
# runs in the foreground; the fault suite's kill rounds and power cuts judge losses against
# timed sync intervals, so it runs last, with the machine to itself. The background run's
# output is printed when it ends. Exit status: non-zero if any of the three failed.
set -u
PY="${PY:-.venv/bin/python}"
log="$(mktemp "${TMPDIR:-/tmp}/jobq-spark-tests.XXXXXX")"
"$PY" -m pytest -q -p no:cacheprovider tests/spark >"$log" 2>&1 &
spark=$!
"$PY" -m pytest -q -p no:cacheprovider --ignore=tests/spark --ignore=tests/fault
rest=$?
wait "$spark"
spark_rc=$?
echo "---- tests/spark (ran in the background) ----"
cat "$log"
rm -f "$log"
"$PY" -m pytest -q -p no:cacheprovider tests/fault
fault=$?
echo "exit: rest $rest, tests/spark $spark_rc, tests/fault $fault"
[ "$rest" -eq 0 ] && [ "$spark_rc" -eq 0 ] && [ "$fault" -eq 0 ]
