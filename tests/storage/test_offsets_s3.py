"""Source offsets on a real S3 server: `offsets` reads a Kafka-source savepoint on the store, `set-offsets` writes
its new Flink savepoint to a URI (data files first, `_metadata` last) as it writes one to disk."""

from __future__ import annotations

import pytest
from test_read_s3 import FIXTURES

from statekit.errors import SavepointExistsError
from statekit.format.storage import locate
from statekit.savepoint.offsets import set_offsets, source_offsets

KAFKA = FIXTURES / "kafka" / "kafka-source-2p"


@pytest.fixture
def s3(s3_server, s3_prefix):
    return lambda name: locate(f"{s3_prefix}/{name}", storage_options=s3_server.options())


def test_offsets_and_set_offsets_on_s3(s3_server, s3, tmp_path):
    remote = locate(s3_server.upload_dir(KAFKA, s3("kafka").path.split("/", 1)[1]), storage_options=s3_server.options())
    assert source_offsets(remote) == source_offsets(KAFKA)
    set_offsets(KAFKA, tmp_path / "out", op="kafka-source", topic="events", partition=1, shift=1, dry_run=False)
    plan = set_offsets(remote, s3("out"), op="kafka-source", topic="events", partition=1, shift=1, dry_run=False)
    assert plan.written
    assert (s3("out") / "_metadata").read_bytes() == (tmp_path / "out" / "_metadata").read_bytes()
    with pytest.raises(SavepointExistsError):
        set_offsets(remote, s3("out"), op="kafka-source", topic="events", partition=1, shift=1, dry_run=False)
