"""A broker as a child process: its config file, the exact command that starts it, readiness, and stopping.

Used by `backbone dev up` and by the integration tests, so both start brokers exactly as a user would
(`python -m backbone broker start --config FILE`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from backbone.coordination import find_free_port

READY_MARKER = "ready on"


class BrokerStartError(RuntimeError):
    """The broker process exited or never became ready; the message holds the end of its output."""


class BrokerProcess:
    def __init__(
        self,
        broker_id: int,
        zookeeper_connect: str,
        directory: Path | str,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        properties: Mapping[str, object] | None = None,
        python: str = sys.executable,
    ) -> None:
        self.broker_id = broker_id
        self.directory = Path(directory)
        self.host = host
        self.port = port or find_free_port(host)
        self.properties: dict[str, str] = {
            "broker.id": str(broker_id),
            "listeners": f"PLAINTEXT://{host}:{self.port}",
            "log.dirs": str(self.directory / "logs"),
            "zookeeper.connect": zookeeper_connect,
        }
        self.properties.update({k: str(v) for k, v in (properties or {}).items()})
        self.config_file = self.directory / f"broker-{broker_id}.properties"
        self.output_file = self.directory / f"broker-{broker_id}.out"
        # Servers log their events (leader changes, ISR changes, truncation) at INFO, as Kafka does.
        self.command = [
            python,
            "-m",
            "backbone",
            "--log-level",
            "INFO",
            "broker",
            "start",
            "--config",
            str(self.config_file),
        ]
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def write_config(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        lines = [f"{key}={value}" for key, value in self.properties.items()]
        self.config_file.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def start(self, timeout: float = 30.0, detach: bool = False) -> None:
        """Start the process and wait until it says it is ready (listening and registered)."""
        self.write_config()
        offset = self.output_file.stat().st_size if self.output_file.exists() else 0
        with open(self.output_file, "ab") as output:
            self.process = subprocess.Popen(
                self.command,
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=detach,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self._output_since(offset)
            if READY_MARKER in text:
                return
            if self.process.poll() is not None:
                raise BrokerStartError(
                    f"broker {self.broker_id} exited with code {self.process.returncode}:\n{text[-3000:]}"
                )
            time.sleep(0.05)
        self.kill()
        raise BrokerStartError(
            f"broker {self.broker_id} not ready after {timeout}s:\n{self._output_since(offset)[-3000:]}"
        )

    def _output_since(self, offset: int) -> str:
        try:
            with open(self.output_file, "rb") as output:
                output.seek(offset)
                return output.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (a clean shutdown), then SIGKILL if it has not exited within `timeout` seconds."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL: the crash case (no clean shutdown, no snapshots)."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def output(self) -> str:
        return self._output_since(0)
