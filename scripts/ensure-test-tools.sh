#!/bin/sh
# Install the Debian packages the tests use, if they are not there yet: chromium for the web
# UI tests (tests/web), jq for the docs' shell examples (tests/docs), etcd-server for the
# failover tests (tests/replication). Idempotent; needs root (or sudo) and apt. The web UI
# tests skip with a reason when chromium cannot be installed.
set -e
CHROMIUM="${JOBQ_CHROMIUM:-/usr/bin/chromium}"
missing=""
[ -x "$CHROMIUM" ] || missing="$missing chromium"
command -v jq >/dev/null 2>&1 || missing="$missing jq"
command -v etcd >/dev/null 2>&1 || missing="$missing etcd-server"
if [ -z "$missing" ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-test-tools: no apt-get; install$missing yourself" >&2
    exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; else
        echo "ensure-test-tools: not root and no sudo; install$missing yourself" >&2
        exit 0
    fi
fi
$SUDO apt-get update -qq || { echo "ensure-test-tools: apt-get update failed" >&2; exit 0; }
# shellcheck disable=SC2086
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null \
    || echo "ensure-test-tools: installing$missing failed" >&2
exit 0
