"""The data source on a real Spark standalone cluster: a master and two workers from the installed
PySpark on loopback ports, a job submitted with spark-submit doing a batch read and a streaming query.
The work spreads over both workers and the results equal local mode's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from spark_support import TEST_JAVA_OPTIONS, create_topic, produce

from backbone.coordination import find_free_port
from backbone.dev.processes import BrokerProcess, start_until_line, stop_child
from tests.helpers.names import unique_name

JOB = Path(__file__).with_name("cluster_job.py")


def spark_bin(name: str) -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / name)


def spark_env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(tmp / "logs"),
        SPARK_DAEMON_JAVA_OPTS=TEST_JAVA_OPTIONS,
    )
    return env


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A master and two workers (one core each); yields the master's URL. All stopped afterwards."""
    tmp = tmp_path_factory.mktemp("standalone")
    env = spark_env(tmp)
    port = find_free_port()
    started = []
    try:
        master = [spark_bin("spark-class"), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
        master += ["--port", str(port), "--webui-port", str(find_free_port())]
        started.append(
            start_until_line(
                master,
                tmp / "master.out",
                "New state: ALIVE",
                "spark master",
                timeout=120,
                detach=False,
                cwd=str(tmp),
            )
        )
        url = f"spark://127.0.0.1:{port}"
        for n in (1, 2):
            worker = [
                spark_bin("spark-class"),
                "org.apache.spark.deploy.worker.Worker",
                url,
                "--host",
                "127.0.0.1",
            ]
            worker += ["--cores", "1", "--memory", "1g", "--webui-port", str(find_free_port())]
            worker += ["--work-dir", str(tmp / f"work-{n}")]
            started.append(
                start_until_line(
                    worker,
                    tmp / f"worker-{n}.out",
                    "Successfully registered with master",
                    f"spark worker {n}",
                    timeout=120,
                    detach=False,
                    cwd=str(tmp),
                )
            )
        os.environ.update({k: env[k] for k in ("PYSPARK_PYTHON", "SPARK_LOCAL_IP")})
        yield url
    finally:
        for process in reversed(started):
            stop_child(process, timeout=20)


@pytest.mark.timeout(1200)  # two JVM daemons, two executors and a driver on a small machine
def test_a_submitted_job_spreads_over_both_workers_with_local_results(
    spark, live_broker: BrokerProcess, standalone_cluster: str, tmp_path: Path
):
    topic = unique_name("cluster")
    create_topic(live_broker.bootstrap, topic, 4)
    produce(live_broker.bootstrap, topic, 2000, 4)
    command = [spark_bin("spark-submit"), "--master", standalone_cluster]
    command += ["--conf", "spark.executor.cores=1", "--conf", "spark.executor.memory=512m"]
    command += ["--conf", f"spark.driver.extraJavaOptions={TEST_JAVA_OPTIONS}"]
    command += ["--conf", f"spark.executor.extraJavaOptions={TEST_JAVA_OPTIONS}"]
    command += ["--conf", "spark.ui.port=0", "--conf", "spark.driver.host=127.0.0.1"]
    command += [str(JOB), live_broker.bootstrap, topic, str(tmp_path / "out")]
    done = subprocess.run(command, env=spark_env(tmp_path), capture_output=True, timeout=1000, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-4000:]
    result = json.loads(done.stdout.decode().strip().splitlines()[-1])

    local = (
        spark.read.format("backbone")
        .option("kafka.bootstrap.servers", live_broker.bootstrap)
        .option("subscribe", topic)
        .load()
        .selectExpr("count(*)", "sum(length(value))")
        .first()
    )
    assert (result["count"], result["sum"]) == (local[0], local[1]) == (2000, local[1])
    assert result["streamed"] == 2000
    executors = result["executors"]
    assert len(executors) == 2, executors
    assert all(e["tasks"] > 0 for e in executors.values()), f"work not spread over both workers: {executors}"
