"""``jobq server``'s election options (``--ha-etcd`` and the rest, docs/ha.md): what they
set, and the bad input they refuse with one line, exit 2, and nothing written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from jobq.cli.server import build_config
from jobq.config import ConfigError
from tests.ports import free_port

ETCD = "http://127.0.0.1:2379"


def test_the_settings() -> None:
    config = build_config(listen="127.0.0.1:9922", ha_etcd=f"{ETCD},127.0.0.2:2379")
    assert config.ha_etcd == f"{ETCD},127.0.0.2:2379"
    assert (config.ha_lease_ttl_s, config.ha_cluster, config.ha_advertise) == (5, "default", None)
    config = build_config(listen="0.0.0.0:9922", ha_etcd=ETCD, ha_lease_ttl=2,
                          ha_cluster="jobs-eu.1", ha_advertise="10.0.0.5:9922",
                          insecure_no_auth=True)
    assert (config.ha_lease_ttl_s, config.ha_cluster) == (2, "jobs-eu.1")
    assert config.ha_advertise == ("10.0.0.5", 9922)
    assert build_config().ha_etcd is None


@pytest.mark.parametrize(
    ("options", "line"),
    [
        ({"ha_etcd": "ftp://127.0.0.1:2379"}, "invalid --ha-etcd: 'ftp://127.0.0.1:2379' is "
         "not an http:// or https:// URL"),
        ({"ha_etcd": "http://127.0.0.1"}, "needs a host and a port"),
        ({"ha_etcd": f"{ETCD},"}, "invalid --ha-etcd: an empty URL"),
        ({"ha_etcd": f"{ETCD}/v3"}, "give etcd's client URL alone"),
        ({"ha_lease_ttl": 3}, "--ha-lease-ttl goes with --ha-etcd"),
        ({"ha_cluster": "x"}, "--ha-cluster goes with --ha-etcd"),
        ({"ha_advertise": "127.0.0.1:9922"}, "--ha-advertise goes with --ha-etcd"),
        ({"ha_etcd": ETCD, "ha_cluster": "a/b"}, "invalid --ha-cluster 'a/b'"),
        ({"ha_etcd": ETCD, "in_memory": True}, "--ha-etcd needs a command log"),
        ({"ha_etcd": ETCD, "replica_of": "127.0.0.1:9000"}, "drop --replica-of"),
        ({"ha_etcd": ETCD, "listen": "0.0.0.0:9922", "insecure_no_auth": True},
         "--listen 0.0.0.0 is not an address others can reach: give --ha-advertise"),
        ({"ha_etcd": ETCD, "ha_advertise": "[::]:9922"}, "is not an address others can reach"),
        ({"ha_etcd": ETCD, "ha_advertise": "127.0.0.1:0"}, "is not an address others can"),
        ({"ha_etcd": ETCD, "ha_advertise": "nohost"}, "invalid listen address 'nohost'"),
    ],
)
def test_bad_input_is_refused(options: dict[str, object], line: str) -> None:
    with pytest.raises(ConfigError, match=None) as refused:
        build_config(**options)  # type: ignore[arg-type]
    assert line in str(refused.value) and "\n" not in str(refused.value)


def _server(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobq", "server", "--listen", f"127.0.0.1:{free_port()}",
         "--data-dir", str(tmp_path / "data"), *options],
        capture_output=True, text=True, timeout=60,
    )


def test_an_etcd_that_cannot_be_reached_at_start_is_one_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = _server(tmp_path, "--ha-etcd", url)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [f"jobq server: cannot reach etcd at {url}: connection refused"]
    assert not (tmp_path / "data").exists()


def test_a_bad_option_is_a_usage_error(tmp_path: Path) -> None:
    result = _server(tmp_path, "--ha-lease-ttl", "0", "--ha-etcd", ETCD)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        "Error: Invalid value for '--ha-lease-ttl': 0 is not in the range 1<=x<=3600."
    )
    assert not (tmp_path / "data").exists()
