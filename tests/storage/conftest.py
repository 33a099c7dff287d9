"""Fixtures of the object-storage tests: one real S3 server process per test session."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "savepoint"))  # savepoint_helpers (the fixtures on files)

from s3_server import BUCKET, S3Server  # noqa: E402

_prefixes = itertools.count()


@pytest.fixture(scope="session")
def s3_server():
    """The session's `S3Server` (moto's standalone server on 127.0.0.1), stopped at the end."""
    server = S3Server()
    yield server
    server.stop()


@pytest.fixture
def s3_prefix(s3_server, request):
    """A fresh ``s3://BUCKET/<test>-<n>`` prefix for one test (nothing is there yet)."""
    name = request.node.name.replace("[", "-").replace("]", "").replace("/", "-")[:60]
    return f"s3://{BUCKET}/{name}-{next(_prefixes)}"
