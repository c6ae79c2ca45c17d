#!/bin/sh
# Install Debian's chromium for the web UI tests (tests/web), if it is not there yet.
# Idempotent; needs root (or sudo) and apt. The tests skip with a reason when this fails.
set -e
CHROMIUM="${JOBQ_CHROMIUM:-/usr/bin/chromium}"
if [ -x "$CHROMIUM" ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-chromium: no apt-get; install chromium yourself (or set JOBQ_CHROMIUM)" >&2
    exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; else
        echo "ensure-chromium: not root and no sudo; the web UI tests will skip" >&2
        exit 0
    fi
fi
$SUDO apt-get update -qq || { echo "ensure-chromium: apt-get update failed" >&2; exit 0; }
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null \
    || echo "ensure-chromium: installing chromium failed; the web UI tests will skip" >&2
exit 0
