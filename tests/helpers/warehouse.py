"""The hourly load's warehouse read back in tests (pyarrow, no Spark)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds


def partition_offsets(warehouse: Path, topic: str) -> Counter:
    """(partition, offset) of every record of `topic` in the warehouse, counted (a duplicate shows as 2)."""
    table = ds.dataset(warehouse / topic, format="parquet", partitioning="hive").to_table(
        columns=["kafka_partition", "kafka_offset"]
    )
    return Counter(zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True))
