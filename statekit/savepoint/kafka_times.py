"""A time as Kafka offsets, asked of a reachable broker (the `kafka` extra: kafka-python 3), for `set-offsets --timestamp`.

A Kafka source's split state holds offsets only, so no savepoint knows which offset a time is; the broker does
(ListOffsets by timestamp). The rule is `OffsetsInitializer.timestamp(t)`'s, the one a Flink job started "from a
time" uses: the first record whose timestamp is at or after `t`, or the partition's end when there is none.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from statekit.errors import BrokerError, InvalidArgumentError, UnknownPartitionError

__all__ = ["BROKER_NEEDED", "offsets_for_time", "parse_timestamp"]

#: why a timestamp needs a broker, for the errors that refuse one without it
BROKER_NEEDED = ("a Kafka source's split state holds offsets only, not times; which offset a time is only the "
                 "broker knows")


def parse_timestamp(value: str | int | dt.datetime) -> int:
    """Epoch milliseconds from an int (milliseconds), digits, an ISO-8601 text (a time without an offset is UTC) or a
    datetime."""
    if isinstance(value, bool):
        raise InvalidArgumentError(f"timestamp {value!r} is neither epoch milliseconds nor an ISO-8601 time.")
    if isinstance(value, int):
        ms = value
    elif isinstance(value, dt.datetime):
        ms = _ms(value)
    else:
        text = value.strip()
        if text.lstrip("-").isdigit():
            ms = int(text)
        else:
            try:
                ms = _ms(dt.datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text))
            except ValueError:
                raise InvalidArgumentError(
                    f"timestamp {value!r} is neither epoch milliseconds nor an ISO-8601 time such as "
                    "2026-12-04T10:00:00Z.") from None
    if ms < 0:
        raise InvalidArgumentError(f"timestamp {value!r} is before 1970; Kafka timestamps are epoch milliseconds >= 0.")
    return ms


def _ms(t: dt.datetime) -> int:
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return int(t.timestamp() * 1000)


def _client_config(config: Mapping[str, str] | None) -> dict[str, Any]:
    """Kafka client properties (``security.protocol``, ``sasl.mechanism``...) as kafka-python's keyword names."""
    return {k.replace(".", "_").replace("-", "_"): v for k, v in (config or {}).items()}


def offsets_for_time(bootstrap_servers: str, topic: str, partitions: list[int], timestamp_ms: int, *,
                     config: Mapping[str, str] | None = None, timeout_s: float = 30.0) -> dict[int, int]:
    """Per partition of `topic` the offset a source started at `timestamp_ms` reads first: the first record at or after
    it, else the partition's end (its next offset).

    `config` are Kafka client properties (``security.protocol``, ``sasl.*``, ``ssl.*``); their values never appear in a
    message.

    Raises
    ------
    MissingExtraError
        kafka-python (``pip install 'statekit[kafka]'``) is not installed.
    BrokerError
        No broker answers at `bootstrap_servers` within `timeout_s`, or it refuses the request.
    UnknownPartitionError
        The broker has no such topic or partition.
    """
    from statekit.extras import require

    require("kafka", "set-offsets --timestamp")
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import KafkaConfigurationError, KafkaError

    timeout_ms = int(timeout_s * 1000)
    try:
        consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, client_id="statekit-set-offsets",
                                 enable_auto_commit=False, bootstrap_timeout_ms=timeout_ms,
                                 **_client_config(config))
    except KafkaConfigurationError:
        raise InvalidArgumentError("the Kafka client properties are not a valid configuration (their values are not "
                                   "shown); give properties as Kafka names them (security.protocol=SSL, "
                                   "sasl.mechanism=PLAIN...).") from None
    except KafkaError as e:
        raise BrokerError(f"no Kafka broker answered at {bootstrap_servers} ({type(e).__name__}); {BROKER_NEEDED}. "
                          "Check --bootstrap-servers (and the client properties), or give --offset N.") from None
    except (TypeError, ValueError) as e:  # an unknown or malformed client property (its value is not shown)
        raise InvalidArgumentError(f"a Kafka client property is not accepted: {type(e).__name__}; give properties "
                                   "as Kafka names them (security.protocol=SSL, sasl.mechanism=PLAIN...).") from None
    try:
        known = consumer.partitions_for_topic(topic)
        if not known:
            raise UnknownPartitionError(f"the broker at {bootstrap_servers} has no topic {topic!r}.")
        missing = sorted(set(partitions) - set(known))
        if missing:
            raise UnknownPartitionError(f"topic {topic!r} at {bootstrap_servers} has no partition(s) {missing}; it has "
                                        f"{sorted(known)}.")
        tps = [TopicPartition(topic, p) for p in partitions]
        found = consumer.offsets_for_times({tp: timestamp_ms for tp in tps})
        ends = consumer.end_offsets([tp for tp in tps if found.get(tp) is None]) if None in found.values() else {}
        return {tp.partition: (found[tp].offset if found.get(tp) is not None else ends[tp]) for tp in tps}
    except KafkaError as e:
        raise BrokerError(f"the Kafka broker at {bootstrap_servers} did not resolve timestamp {timestamp_ms} for "
                          f"{topic} ({type(e).__name__}: {e}).") from None
    finally:
        consumer.close()
