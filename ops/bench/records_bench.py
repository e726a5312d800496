"""Record batch v2 throughput: encode (the producer's builders) and decode (decode_batches), per codec.

Records carry 200-byte JSON-like values (compressible about as much as real tracking events: a random
session id and counters among repeated field names) and 13-byte keys, in batches capped at 16 KiB and at
1 MiB uncompressed, the way a producer fills them. Two more uncompressed workloads show the decoder's
two paths: null keys (what `client_bench.py` sends; records alike, decoded a run at a time) and values of
mixed sizes, 120-400 bytes (no two records alike, decoded one at a time). Encode counts appending and
building; decode takes one buffer of back-to-back batches, like a fetch response, with the CRC checked.
Each cell is the best of `--repeat` runs over `--records` records, timed in CPU seconds of this process
(`process_time`) and taken in rounds over the whole table, so other work on a shared machine counts as
little as possible.
Uncompressed batches are encoded by aiokafka's compiled builder, as the producer does
(`backbone/client/producer/batch_builder.py`); our own `RecordBatchBuilder` (which the producer uses for
compressed batches) and kio's record reader/writer (uncompressed only: it has no codecs) are measured
alongside.

    python ops/bench/records_bench.py [--records 50000] [--repeat 7]

Prints a markdown table. Bounded: about a minute with the defaults on a small VM.
"""

from __future__ import annotations

import argparse
import datetime
import io
import platform
import random
import sys
import time
from collections.abc import Callable
from functools import partial

from kio.records.readers import read_batch
from kio.records.schema import NewRecordBatch
from kio.records.schema import Record as KioRecord
from kio.records.writers import write_new_batch
from kio.static.primitive import TZAwareMicros, i8, i16, i32, i64

from backbone.client.producer.batch_builder import BatchBuilder, CappedBatchBuilder, new_batch_builder
from backbone.protocol.compression import Codec
from backbone.protocol.records import Header, decode_batches

VALUE_SIZE = 200
BATCH_SIZES = {"16 KiB": 16 * 1024, "1 MiB": 1024 * 1024}
T0 = 1_700_000_000_000


Row = tuple[bytes | None, bytes, int]
NO_HEADERS: list[Header] = []
KEYED, NULL_KEYS, MIXED_SIZES = "keyed", "null keys", "mixed sizes"


def make_rows(count: int, shape: str = KEYED) -> list[Row]:
    rng = random.Random(42)
    rows: list[Row] = []
    for i in range(count):
        value = b'{"user":%08d,"event":"page_view","page":"/products/%06d","session":"%032x","n":%d}' % (
            rng.randrange(10**8),
            rng.randrange(10**6),
            rng.getrandbits(128),
            i,
        )
        size = rng.randrange(120, 400) if shape == MIXED_SIZES else VALUE_SIZE
        key = None if shape == NULL_KEYS else b"user-%08d" % (i % 100_000)
        rows.append((key, value.ljust(size, b" "), T0 + i // 100))
    return rows


def encode(
    rows: list[Row], codec: Codec, max_bytes: int, make: Callable[..., BatchBuilder] = new_batch_builder
) -> list[bytes]:
    """The rows in batches, as the producer builds them (`make`: which builder)."""
    batches = []
    builder = make(codec, None, max_bytes)
    offset = 0  # within the batch
    for key, value, timestamp in rows:
        if builder.append(offset, timestamp, key, value, NO_HEADERS) is None:
            batches.append(bytes(builder.build()))
            builder = make(codec, None, max_bytes)
            offset = 0
            builder.append(offset, timestamp, key, value, NO_HEADERS)
        offset += 1
    batches.append(bytes(builder.build()))
    return batches


def decode(data: bytes) -> int:
    count = 0
    for batch in decode_batches(data):
        count += len(batch.records)
    return count


def kio_encode(rows: list[Row], max_bytes: int) -> list[bytes]:
    # kio wants whole record objects up front; batch them by the same uncompressed budget.
    per_batch = max(1, max_bytes // (VALUE_SIZE + 30))
    stamp = TZAwareMicros.parse(datetime.datetime.fromtimestamp(T0 / 1000, datetime.UTC))
    batches = []
    for start in range(0, len(rows), per_batch):
        records = tuple(
            KioRecord(attributes=i8(0), timestamp=stamp, offset=i64(i), key=key, value=value, headers=())
            for i, (key, value, _) in enumerate(rows[start : start + per_batch])
        )
        out = io.BytesIO()
        write_new_batch(
            out,
            NewRecordBatch(
                producer_id=i64(-1),
                producer_epoch=i16(-1),
                base_sequence=i32(-1),
                records=records,
                attributes=i16(0),
            ),
        )
        batches.append(out.getvalue())
    return batches


def kio_decode(data: bytes) -> int:
    count = 0
    pos = 0
    while pos < len(data):
        batch, size = read_batch(data, pos)
        count += len(batch.records)
        pos += size
    return count


class Cell:
    """One table row: how to encode and decode its records, and the best CPU seconds seen for each."""

    def __init__(
        self, name: str, shape: str, label: str, run_encode: Callable[[], object], data: bytes
    ) -> None:
        self.name = name
        self.shape = shape
        self.label = label
        self.run_encode = run_encode
        self.data = data
        self.encode_seconds = float("inf")
        self.decode_seconds = float("inf")


def timed(run: Callable[[], object]) -> float:
    start = time.process_time()
    run()
    return time.process_time() - start


def cells(count: int) -> list[tuple[Cell, Callable[[bytes], int]]]:
    rows = make_rows(count)
    workloads = [(codec, KEYED, rows) for codec in Codec]
    workloads += [(Codec.NONE, shape, make_rows(count, shape)) for shape in (NULL_KEYS, MIXED_SIZES)]
    out: list[tuple[Cell, Callable[[bytes], int]]] = []
    for codec, shape, shape_rows in workloads:
        for label, max_bytes in BATCH_SIZES.items():
            data = b"".join(encode(shape_rows, codec, max_bytes))
            if decode(data) != count:
                sys.exit(f"decoded record count mismatch for {codec.name} {shape} {label}")
            run = partial(encode, shape_rows, codec, max_bytes)
            out.append((Cell(codec.name.lower(), shape, label, run, data), decode))
    for label, max_bytes in BATCH_SIZES.items():
        # The producer's uncompressed batches come from aiokafka's compiled builder; ours, for comparison.
        data = b"".join(encode(rows, Codec.NONE, max_bytes, CappedBatchBuilder))
        if decode(data) != count:
            sys.exit(f"decoded record count mismatch for our encoder, {label}")
        run = partial(encode, rows, Codec.NONE, max_bytes, CappedBatchBuilder)
        out.append((Cell("none (our RecordBatchBuilder)", KEYED, label, run, data), decode))
    for label, max_bytes in BATCH_SIZES.items():
        data = b"".join(kio_encode(rows, max_bytes))
        if kio_decode(data) != count or decode(data) != count:
            sys.exit(f"kio round trip mismatch for {label}")
        run = partial(kio_encode, rows, max_bytes)
        out.append((Cell("none (kio.records)", KEYED, label, run, data), kio_decode))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=50_000, help="records per measurement")
    parser.add_argument("--repeat", type=int, default=7, help="runs per cell; the best counts")
    args = parser.parse_args()
    n = args.records
    table = cells(n)
    # Rounds over the whole table rather than repeats of one cell in a row: a burst of other load on
    # the machine then spoils one sample of many cells instead of every sample of one.
    for _ in range(args.repeat):
        for cell, run_decode in table:
            cell.encode_seconds = min(cell.encode_seconds, timed(cell.run_encode))
            cell.decode_seconds = min(cell.decode_seconds, timed(partial(run_decode, cell.data)))

    print(
        f"Python {platform.python_version()} on {platform.machine()}, {n} records, {VALUE_SIZE}-byte values"
    )
    print()
    print("| codec | records | batch | encode records/s | decode records/s | bytes/record on the wire |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for cell, _ in table:
        encode_rate = n / cell.encode_seconds
        decode_rate = n / cell.decode_seconds
        size = len(cell.data) / n
        print(
            f"| {cell.name} | {cell.shape} | {cell.label} | {encode_rate:,.0f} | {decode_rate:,.0f} "
            f"| {size:.1f} |"
        )


if __name__ == "__main__":
    main()
