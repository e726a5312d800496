"""Codec throughput: our codec (kio) vs kio's bare reader vs kafka-python vs our fast paths.

    python ops/bench/codec_bench.py [--seconds 0.2] [--write docs/benchmarks.md]

Decodes and encodes (bodies only, no headers) of the messages that decide the broker's cost:
Produce requests (16 KiB and 1 MiB batches), Fetch requests, a 100 topic x 10 partition
Metadata response, Produce responses and Fetch responses, at the newest version we advertise
(flexible) and at the newest non-flexible one. Each cell is the best of three runs of about
`--seconds` each; the whole run takes well under a minute. Prints a markdown table of ops/s.

"codec (kio)" is `backbone.protocol.codec`: kio plus, for flexible versions, the schema walk
that guards kio's reader (see codec's docstring); "kio reader alone" is kio without the guard.
The fast path encodes the Fetch response as chunks and hands records through untouched, which is
what the broker does; kio and kafka-python copy the records into their output.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafka.protocol.consumer import FetchRequest as KpFetchRequest
from kafka.protocol.consumer import FetchResponse as KpFetchResponse
from kafka.protocol.metadata import MetadataResponse as KpMetadataResponse
from kafka.protocol.producer import ProduceRequest as KpProduceRequest
from kafka.protocol.producer import ProduceResponse as KpProduceResponse
from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from kio.static.constants import EntityType
from kio.static.primitive import i32Timedelta

from backbone.protocol.codec import decode_request, decode_response, encode
from backbone.wire.fetch import FetchPartitionResult, encode_fetch_response
from backbone.wire.produce import ProducePartitionResult, decode_produce_request, encode_produce_response

PRODUCE, FETCH, METADATA = 0, 1, 3
SMALL_BATCH = bytes(range(256)) * 64  # a 16 KiB record batch stand-in (Java's batch.size)
LARGE_BATCH = bytes(range(256)) * 4096  # 1 MiB (librdkafka's batch.size is about that)
FETCH_RECORDS = bytes(range(256)) * 256  # 64 KiB of records per fetched partition
PRODUCE_SHAPE = (5, 4)  # topics x partitions
FETCH_SHAPE = (10, 10)
METADATA_SHAPE = (100, 10)


def make(cls: type, **values: Any) -> Any:
    """A kio entity of `cls` from the values its version has."""
    names = {field.name for field in dataclasses.fields(cls)}
    return cls(**{name: value for name, value in values.items() if name in names})


def zero_ms() -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(0))


def measure(func: Callable[[], object], seconds: float) -> float:
    """Best operations/second over three runs of about `seconds` each."""
    count = 1
    while True:  # calibrate: grow the batch until one batch takes a tenth of the budget
        start = time.perf_counter()
        for _ in range(count):
            func()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds / 10:
            break
        count *= 2
    per_run = max(1, int(count * seconds / elapsed))
    best = 0.0
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(per_run):
            func()
        best = max(best, per_run / (time.perf_counter() - start))
    return best


# -- message builders (one per message and library) -------------------------------------------


def produce_request(version: int, batch: bytes) -> tuple[bytes, Any, Any]:
    """(body bytes, kio entity, kafka-python object) for one Produce request."""
    m = load_payload_module(PRODUCE, version, EntityType.request)
    topics, partitions = PRODUCE_SHAPE
    kio_obj = make(
        m.ProduceRequest,
        transactional_id=None,
        acks=-1,
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        topic_data=tuple(
            m.TopicProduceData(
                name=f"topic-{t}",
                partition_data=tuple(
                    m.PartitionProduceData(index=p, records=batch) for p in range(partitions)
                ),
            )
            for t in range(topics)
        ),
    )
    kp_topic = KpProduceRequest.TopicProduceData
    kp_obj = KpProduceRequest(
        version=version,
        transactional_id=None,
        acks=-1,
        timeout_ms=30_000,
        topic_data=[
            kp_topic(
                name=f"topic-{t}",
                partition_data=[
                    kp_topic.PartitionProduceData(index=p, records=batch) for p in range(partitions)
                ],
            )
            for t in range(topics)
        ],
    )
    return encode(kio_obj), kio_obj, kp_obj


def fetch_request(version: int) -> tuple[bytes, Any, Any]:
    m = load_payload_module(FETCH, version, EntityType.request)
    topics, partitions = FETCH_SHAPE
    kio_obj = make(
        m.FetchRequest,
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=500)),
        min_bytes=1,
        topics=tuple(
            m.FetchTopic(
                topic=f"topic-{t}",
                partitions=tuple(
                    make(m.FetchPartition, partition=p, fetch_offset=1000 * p, partition_max_bytes=1 << 20)
                    for p in range(partitions)
                ),
            )
            for t in range(topics)
        ),
        forgotten_topics_data=(),
    )
    kp_topic = KpFetchRequest.FetchTopic
    kp_obj = KpFetchRequest(
        version=version,
        max_wait_ms=500,
        min_bytes=1,
        topics=[
            kp_topic(
                topic=f"topic-{t}",
                partitions=[
                    kp_topic.FetchPartition(partition=p, fetch_offset=1000 * p, partition_max_bytes=1 << 20)
                    for p in range(partitions)
                ],
            )
            for t in range(topics)
        ],
        forgotten_topics_data=[],
    )
    return encode(kio_obj), kio_obj, kp_obj


def metadata_response(version: int) -> tuple[bytes, Any, Any]:
    m = load_payload_module(METADATA, version, EntityType.response)
    topics, partitions = METADATA_SHAPE

    def part(p: int) -> dict[str, Any]:
        return {
            "error_code": ErrorCode.none,
            "partition_index": p,
            "leader_id": p % 3,
            "leader_epoch": 7,
            "replica_nodes": (0, 1, 2),
            "isr_nodes": (0, 1, 2),
            "offline_replicas": (),
        }

    kio_obj = make(
        m.MetadataResponse,
        throttle_time=zero_ms(),
        brokers=tuple(
            make(m.MetadataResponseBroker, node_id=b, host=f"broker-{b}", port=9092, rack=None)
            for b in range(3)
        ),
        cluster_id="cluster",
        controller_id=0,
        topics=tuple(
            make(
                m.MetadataResponseTopic,
                error_code=ErrorCode.none,
                name=f"topic-{t}",
                topic_id=None,
                is_internal=False,
                partitions=tuple(make(m.MetadataResponsePartition, **part(p)) for p in range(partitions)),
            )
            for t in range(topics)
        ),
    )
    kp_topic = KpMetadataResponse.MetadataResponseTopic
    kp_part_fields = {f["name"] for f in KpMetadataResponse.json["fields"][4]["fields"][4]["fields"]}
    kp_obj = KpMetadataResponse(
        version=version,
        throttle_time_ms=0,
        brokers=[
            KpMetadataResponse.MetadataResponseBroker(node_id=b, host=f"broker-{b}", port=9092, rack=None)
            for b in range(3)
        ],
        cluster_id="cluster",
        controller_id=0,
        topics=[
            kp_topic(
                error_code=0,
                name=f"topic-{t}",
                is_internal=False,
                partitions=[
                    kp_topic.MetadataResponsePartition(
                        error_code=0,
                        partition_index=p,
                        leader_id=p % 3,
                        leader_epoch=7,
                        replica_nodes=[0, 1, 2],
                        isr_nodes=[0, 1, 2],
                        **({"offline_replicas": []} if "OfflineReplicas" in kp_part_fields else {}),
                    )
                    for p in range(partitions)
                ],
            )
            for t in range(topics)
        ],
    )
    return encode(kio_obj), kio_obj, kp_obj


def produce_response(version: int) -> tuple[bytes, Any, Any, Callable[[], object]]:
    m = load_payload_module(PRODUCE, version, EntityType.response)
    topics, partitions = PRODUCE_SHAPE
    kio_obj = make(
        m.ProduceResponse,
        throttle_time=zero_ms(),
        responses=tuple(
            m.TopicProduceResponse(
                name=f"topic-{t}",
                partition_responses=tuple(
                    make(
                        m.PartitionProduceResponse,
                        index=p,
                        error_code=ErrorCode.none,
                        base_offset=10_000 + p,
                        log_append_time=None,
                        log_start_offset=0,
                        record_errors=(),
                    )
                    for p in range(partitions)
                ),
            )
            for t in range(topics)
        ),
    )
    kp_topic = KpProduceResponse.TopicProduceResponse
    kp_obj = KpProduceResponse(
        version=version,
        throttle_time_ms=0,
        responses=[
            kp_topic(
                name=f"topic-{t}",
                partition_responses=[
                    kp_topic.PartitionProduceResponse(
                        index=p, error_code=0, base_offset=10_000 + p, log_start_offset=0
                    )
                    for p in range(partitions)
                ],
            )
            for t in range(topics)
        ],
    )
    ours = [
        (f"topic-{t}", [ProducePartitionResult(p, 0, 10_000 + p, -1, 0) for p in range(partitions)])
        for t in range(topics)
    ]
    return encode(kio_obj), kio_obj, kp_obj, lambda: encode_produce_response(version, ours)


def fetch_response(version: int) -> tuple[bytes, Any, Any, Callable[[], object]]:
    m = load_payload_module(FETCH, version, EntityType.response)
    topics, partitions = PRODUCE_SHAPE

    kio_obj = make(
        m.FetchResponse,
        throttle_time=zero_ms(),
        error_code=ErrorCode.none,
        session_id=0,
        responses=tuple(
            m.FetchableTopicResponse(
                topic=f"topic-{t}",
                partitions=tuple(
                    make(
                        m.PartitionData,
                        partition_index=p,
                        error_code=ErrorCode.none,
                        high_watermark=5000,
                        last_stable_offset=5000,
                        log_start_offset=0,
                        aborted_transactions=None,
                        records=FETCH_RECORDS,
                    )
                    for p in range(partitions)
                ),
            )
            for t in range(topics)
        ),
    )
    kp_topic = KpFetchResponse.FetchableTopicResponse
    kp_obj = KpFetchResponse(
        version=version,
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[
            kp_topic(
                topic=f"topic-{t}",
                partitions=[
                    kp_topic.PartitionData(
                        partition_index=p,
                        error_code=0,
                        high_watermark=5000,
                        last_stable_offset=5000,
                        log_start_offset=0,
                        aborted_transactions=None,
                        records=FETCH_RECORDS,
                    )
                    for p in range(partitions)
                ],
            )
            for t in range(topics)
        ],
    )
    ours = [
        (
            f"topic-{t}",
            [FetchPartitionResult(p, 0, 5000, 5000, 0, None, -1, FETCH_RECORDS) for p in range(partitions)],
        )
        for t in range(topics)
    ]
    return encode(kio_obj), kio_obj, kp_obj, lambda: encode_fetch_response(version, ours)


# -- the run ----------------------------------------------------------------------------------


Op = Callable[[], object]


@dataclass(frozen=True)
class Case:
    """One message: how each library decodes and encodes it (None: not measured).

    Each tuple is (our codec, kio's reader alone, kafka-python, our fast path).
    """

    label: str
    decoders: tuple[Op, Op | None, Op, Op | None]
    encoders: tuple[Op, Op | None, Op, Op | None] | None


def case(
    label: str,
    api_key: int,
    version: int,
    built: tuple[bytes, Any, Any],
    kp_class: Any,
    *,
    request: bool,
    fast_decode: Callable[[bytes, int], object] | None = None,
    fast_encode: Op | None = None,
    encoders: bool = True,
) -> Case:
    body, kio_obj, kp_obj = built
    decode = decode_request if request else decode_response
    raw_reader = entity_reader(type(kio_obj))
    decoders = (
        lambda: decode(api_key, version, body),
        lambda: raw_reader(body, 0),
        lambda: kp_class.decode(body, version=version),
        None if fast_decode is None else lambda: fast_decode(body, version),
    )
    return Case(
        label, decoders, (lambda: encode(kio_obj), None, kp_obj.encode, fast_encode) if encoders else None
    )


def cases() -> list[Case]:
    out = []
    p_topics, p_parts = PRODUCE_SHAPE
    for version in (9, 7):
        for batch, size in ((SMALL_BATCH, "16 KiB"), (LARGE_BATCH, "1 MiB")):
            out.append(
                case(
                    f"Produce request v{version} ({p_topics}x{p_parts} x {size})",
                    PRODUCE,
                    version,
                    produce_request(version, batch),
                    KpProduceRequest,
                    request=True,
                    fast_decode=decode_produce_request,
                    encoders=batch is SMALL_BATCH,
                )
            )
    for version in (12, 11):
        label = f"Fetch request v{version} ({FETCH_SHAPE[0]}x{FETCH_SHAPE[1]})"
        out.append(case(label, FETCH, version, fetch_request(version), KpFetchRequest, request=True))
    for version in (12, 8):
        label = f"Metadata response v{version} ({METADATA_SHAPE[0]}x{METADATA_SHAPE[1]})"
        out.append(
            case(label, METADATA, version, metadata_response(version), KpMetadataResponse, request=False)
        )
    for version in (9, 7):
        *built, fast = produce_response(version)
        label = f"Produce response v{version} ({p_topics}x{p_parts})"
        out.append(
            case(label, PRODUCE, version, tuple(built), KpProduceResponse, request=False, fast_encode=fast)  # type: ignore[arg-type]
        )
    for version in (12, 11):
        *built, fast = fetch_response(version)
        label = f"Fetch response v{version} ({p_topics}x{p_parts} x 64 KiB)"
        out.append(
            case(label, FETCH, version, tuple(built), KpFetchResponse, request=False, fast_encode=fast)
        )  # type: ignore[arg-type]
    return out


Row = tuple[str, str, float, float | None, float, float | None]


def rows(seconds: float) -> list[Row]:
    """(message, operation, codec, kio reader, kafka-python, fast path) in ops/s (None: n/a)."""
    out: list[Row] = []
    for item in cases():
        for op, funcs in (("decode", item.decoders), ("encode", item.encoders)):
            if funcs is None:
                continue
            ours, raw, kp, fast = (None if fn is None else measure(fn, seconds) for fn in funcs)
            assert ours is not None and kp is not None
            out.append((item.label, op, ours, raw, kp, fast))
            print(".", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return out


def table(results: list[Row]) -> str:
    lines = [
        "| message | op | codec (kio) | kio reader alone | kafka-python | fast path | fast / codec |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]

    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:,.0f}"

    for label, op, ours, raw, kp, fast in results:
        ratio = "-" if fast is None else f"{fast / ours:.1f}x"
        lines.append(f"| {label} | {op} | {cell(ours)} | {cell(raw)} | {cell(kp)} | {cell(fast)} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.2, help="time per measurement run (default 0.2)")
    parser.add_argument(
        "--write", metavar="PATH", help="also append the table and command to this markdown file"
    )
    args = parser.parse_args(argv)
    command = "python ops/bench/codec_bench.py" + (
        f" --seconds {args.seconds}" if args.seconds != 0.2 else ""
    )
    started = time.perf_counter()
    results = rows(args.seconds)
    report = (
        f"## Protocol codecs\n\n`{command}` (Python {platform.python_version()}, {platform.machine()}, "
        f"{time.perf_counter() - started:.0f} s)\n\n{table(results)}\n"
    )
    print(report)
    if args.write:
        with open(args.write, "a", encoding="utf-8") as out:
            out.write("\n" + report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
