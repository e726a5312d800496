"""Backbone topics as a Spark data source and sink, format "backbone", batch and streaming.

    from backbone_spark import register
    register(spark)
    df = spark.read.format("backbone").option("kafka.bootstrap.servers", "127.0.0.1:9092") \\
        .option("subscribe", "pageviews").load()

Columns and options are those of Spark's Kafka source; see docs/spark.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from backbone_spark.source import BackboneDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["BackboneDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Make format "backbone" available in `spark` (readers, writers, batch and streaming)."""
    spark.dataSource.register(BackboneDataSource)
