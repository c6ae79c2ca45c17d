"""The live servers of tests/http (module-scoped, one with a token) for ``jobq status``."""

from tests.http.conftest import live, live_auth

__all__ = ["live", "live_auth"]
