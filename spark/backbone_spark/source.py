"""The `backbone` data source: what Spark calls to read and write Backbone topics.

Spark instantiates `BackboneDataSource` with the options; its readers plan on the driver (`Planner`) and
read in tasks (`read_range`); its writers produce in tasks (`writing.py`). The streaming reader is in
`streaming.py`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from backbone_spark.options import ReadSettings, WriteSettings
from backbone_spark.planning import OffsetRange, Planner
from backbone_spark.reading import read_range, spark_schema

__all__ = ["BackboneDataSource", "RangePartition"]


class RangePartition(InputPartition):
    """One Spark task's share: an offset range of one topic partition."""

    def __init__(self, offsets: OffsetRange) -> None:
        super().__init__(offsets)
        self.offsets = offsets


class BackboneBatchReader(DataSourceReader):
    def __init__(self, settings: ReadSettings) -> None:
        self.settings = settings
        # Planned here, on the driver, so bad options fail before any task starts.
        with Planner(settings) as planner:
            self.ranges = planner.batch_ranges()

    def partitions(self) -> list[InputPartition]:
        return [RangePartition(r) for r in self.ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, RangePartition):
            yield from read_range(self.settings, partition.offsets)


class BackboneDataSource(DataSource):
    """Format "backbone": Spark's Kafka source and sink, options and columns alike, for Backbone."""

    @classmethod
    def name(cls) -> str:
        return "backbone"

    def schema(self) -> StructType:
        headers = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return spark_schema(headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return BackboneBatchReader(ReadSettings.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from backbone_spark.streaming import BackboneStreamReader

        return BackboneStreamReader(ReadSettings.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        from backbone_spark.writing import BackboneWriter

        return BackboneWriter(WriteSettings.parse(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        from backbone_spark.writing import BackboneStreamWriter

        return BackboneStreamWriter(WriteSettings.parse(self.options), schema)
