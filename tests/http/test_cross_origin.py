"""Another web site's page, open in the user's browser, must not act on a jobq server: a
form or a no-cors fetch reaches a server without a token (the default) with no token
needed, so writes that a browser marks as cross-origin are refused with 403 JSON."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.harness import RunningServer

#: what Chromium sends with a form POST from http://evil.example to the server
CROSS_SITE = {
    "Origin": "http://evil.example",
    "Sec-Fetch-Site": "cross-site",
    "Content-Type": "application/x-www-form-urlencoded",
}


@pytest.fixture(scope="module")
def http(live: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live.http_url, timeout=10) as client:
        yield client


def _job(http: httpx.Client) -> str:
    response = http.post("/api/jobs", json={"name": "csrf.target"})
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


@pytest.mark.parametrize("headers", [
    CROSS_SITE,
    # a site on another port of the same host (another local service) is same-site
    {**CROSS_SITE, "Origin": "http://127.0.0.1:1", "Sec-Fetch-Site": "same-site"},
    # a browser that sends no Sec-Fetch-Site: its Origin names another host
    {"Origin": "http://evil.example", "Content-Type": "text/plain"},
    # a sandboxed frame or a data: URL
    {"Origin": "null", "Content-Type": "text/plain"},
])
def test_cross_origin_write_is_refused(http: httpx.Client, headers: dict[str, str]) -> None:
    job_id = _job(http)
    for path in (f"/api/jobs/{job_id}/cancel", f"/api/jobs/{job_id[:8]}/pause"):
        response = http.post(path, headers=headers, content=b"")
        assert response.status_code == 403, response.text
        assert "cross-origin" in response.json()["error"]
    assert http.get(f"/api/jobs/{job_id}").json()["status"] == "pending"


def test_same_origin_and_non_browser_writes_work(http: httpx.Client, live: RunningServer) -> None:
    job_id = _job(http)
    host = live.http_url.split("://", 1)[1]
    same = {"Origin": live.http_url, "Sec-Fetch-Site": "same-origin"}
    assert http.post(f"/api/jobs/{job_id}/pause", headers=same).status_code == 200
    # an old browser: no Sec-Fetch-Site, its Origin the server's own
    old = {"Origin": f"http://{host}"}
    assert http.post(f"/api/jobs/{job_id}/resume", headers=old).status_code == 200
    # a client that is no browser sends neither header (the CLI, curl, the Python client)
    assert http.post(f"/api/jobs/{job_id}/cancel").status_code == 200
    # reads stay open: the browser keeps their answers from the other site's page
    assert http.get("/api/jobs", headers=CROSS_SITE).status_code == 200


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8090", "10.0.0.1", "[fe80::1]"])
def test_a_server_without_a_token_answers_no_other_name_than_loopback(
    http: httpx.Client, host: str
) -> None:
    # DNS rebinding: evil.example, resolved to 127.0.0.1 after its page loaded, is then
    # same-origin with the server; its requests still name it in Host
    for method, path in (("GET", "/api/jobs"), ("POST", "/api/jobs")):
        answer = http.request(method, path, headers={"Host": host}, json={"name": "x"})
        assert answer.status_code == 403, answer.text
        assert "loopback names" in answer.json()["error"]
    assert http.get("/api/jobs", params={"name": "x"}).json()["jobs"] == []


@pytest.mark.parametrize(
    "host", ["localhost", "localhost:8090", "app.localhost", "127.0.0.1", "127.1.2.3:80", "[::1]:9"]
)
def test_loopback_names_are_answered(http: httpx.Client, host: str) -> None:
    assert http.get("/api/server", headers={"Host": host}).status_code == 200
