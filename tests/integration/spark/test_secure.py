"""The data source on a SASL_SSL listener: the security options (`kafka.security.protocol`, `kafka.sasl.*`,
`kafka.ssl.*`) go straight to our client, so Spark writes and reads with SCRAM-SHA-512 over TLS; without
them the broker does not let it in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from security_fixtures import secure_client

from tests.helpers.names import unique_name


def options(certificates: Path, port: int) -> dict[str, str]:
    return {f"kafka.{key}": str(value) for key, value in secure_client(certificates, port).items()}


def test_spark_writes_and_reads_with_scram_over_tls(spark: Any, secure_broker, certificates: Path) -> None:
    _, sasl_port, _ = secure_broker
    topic = unique_name("secure-spark")
    secure = options(certificates, sasl_port)
    rows = [(f"k{i}", f"v{i}") for i in range(50)]
    writer = spark.createDataFrame(rows, "key string, value string").write.format("backbone").mode("append")
    for name, value in {**secure, "topic": topic}.items():
        writer = writer.option(name, value)
    writer.save()

    reader = spark.read.format("backbone")
    for name, value in {**secure, "subscribe": topic}.items():
        reader = reader.option(name, value)
    read = reader.load().selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value").collect()
    assert sorted((row.key, row.value) for row in read) == sorted(rows)

    anonymous = {**secure, "kafka.security.protocol": "SSL"}  # TLS, but no SASL login on a SASL listener
    reader = spark.read.format("backbone")
    for name, value in {**anonymous, "subscribe": topic, "kafka.request.timeout.ms": "5000"}.items():
        reader = reader.option(name, value)
    with pytest.raises(Exception):  # noqa: B017 - Spark wraps the client's error in its own
        reader.load().collect()
