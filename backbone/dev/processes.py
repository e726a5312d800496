"""A broker as a child process: its config file, the exact command that starts it, readiness, and stopping.

Used by `backbone dev up` and by the integration tests, so both start brokers exactly as a user would
(`python -m backbone broker start --config FILE`).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from backbone.coordination import find_free_port

READY_MARKER = "ready on"


def spawn(
    command: list[str], output_file: Path | str | None, *, cwd: str | None = None, detach: bool = True
) -> subprocess.Popen[bytes]:
    """Start `command` with its output appended to `output_file` (a file, never a pipe that could fill up);
    `detach` puts it in its own session so it outlives the command that started it and a Ctrl-C there."""
    with open(output_file or os.devnull, "ab") as output:
        return subprocess.Popen(
            command,
            cwd=cwd,
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=detach,
        )


class StartError(RuntimeError):
    """A process exited or never became ready; the message holds the end of its output."""


class BrokerStartError(StartError):
    """The broker process exited or never became ready; the message holds the end of its output."""


def output_tail(output_file: Path | str | None, limit: int = 3000) -> str:
    return output_since(output_file, 0)[-limit:]


def output_since(output_file: Path | str | None, offset: int) -> str:
    if output_file is None:
        return ""
    try:
        with open(output_file, "rb") as output:
            output.seek(offset)
            return output.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def exit_reason(output: str, context: int = 5) -> str:
    """Why a process that exited at start did so, from its own output: its ERROR/CRITICAL lines and the
    last line of a traceback, else its last few lines."""
    lines = [line for line in output.splitlines() if line.strip()]
    reasons = [line for line in lines if " ERROR " in line or " CRITICAL " in line]
    if lines and lines[-1][:1] not in (" ", "\t") and any(line.startswith("Traceback") for line in lines):
        reasons.append(lines[-1])  # the exception that ended it
    shown = reasons[-context:] or lines[-context:]
    return "\n".join(shown) if shown else "(it wrote nothing)"


def output_size(output_file: Path | str) -> int:
    path = Path(output_file)
    return path.stat().st_size if path.exists() else 0


def start_until_line(
    command: list[str],
    output_file: Path | str,
    ready_line: str,
    what: str,
    *,
    timeout: float,
    cwd: str | None = None,
    detach: bool = True,
    error: type[StartError] = StartError,
) -> subprocess.Popen[bytes]:
    """Start `command` and wait until its own new output holds `ready_line`. A process's own words are
    proof of readiness that a port is not: a port can still answer for a dying predecessor."""
    offset = output_size(output_file)
    process = spawn(command, output_file, cwd=cwd, detach=detach)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            text = output_since(output_file, offset)
            if ready_line in text:
                return process
            if process.poll() is not None:
                raise error(f"{what} exited with code {process.returncode}: {exit_reason(text)}")
            time.sleep(0.05)
        raise error(f"{what} not ready after {timeout}s:\n{output_since(output_file, offset)[-3000:]}")
    except BaseException:
        if process.poll() is None:  # never leave behind a process nobody knows of
            process.kill()
            process.wait()
        raise


def start_role(
    name: str,
    command: list[str],
    output: Path,
    ready_line: str,
    marker: str,
    started: list[subprocess.Popen[bytes]],
    *,
    timeout: float,
    **details: Any,
) -> dict[str, Any]:
    """Start a dev role's process detached until its output holds `ready_line`, and return its topology.json
    entry (`details` after its name). The process is appended to `started` so that a caller can stop it
    when a later step fails; `marker` is what only its command line holds, to find it again."""
    output.parent.mkdir(parents=True, exist_ok=True)
    process = start_until_line(command, output, ready_line, name, timeout=timeout)
    started.append(process)
    return {
        "name": name,
        **details,
        "pid": process.pid,
        "start": command,
        "marker": marker,
        "output": str(output),
        "ready": ready_line,
    }


def wait_listening(
    host: str,
    port: int,
    what: str,
    *,
    process: subprocess.Popen[bytes] | None = None,
    output_file: Path | str | None = None,
    timeout: float = 60.0,
) -> None:
    """Wait until something accepts connections on host:port; fail at once, with the end of its output,
    when `process` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            sock.settimeout(1.0)
            if sock.connect_ex((host, port)) == 0:
                return
        if process is not None and process.poll() is not None:
            raise StartError(f"{what} exited with code {process.returncode}:\n{output_tail(output_file)}")
        time.sleep(0.1)
    raise StartError(
        f"{what} is not listening on {host}:{port} after {timeout:.0f}s:\n{output_tail(output_file)}"
    )


def stop_child(process: subprocess.Popen[bytes], timeout: float = 30.0) -> int:
    """SIGTERM (a clean shutdown), then SIGKILL if it has not exited within `timeout` seconds."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


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
        self.process = start_until_line(
            self.command,
            self.output_file,
            READY_MARKER,
            f"broker {self.broker_id}",
            timeout=timeout,
            detach=detach,
            error=BrokerStartError,
        )

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (a clean shutdown), then SIGKILL if it has not exited within `timeout` seconds."""
        if self.process is None:
            return None
        return stop_child(self.process, timeout)

    def kill(self) -> None:
        """SIGKILL: the crash case (no clean shutdown, no snapshots)."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def output(self) -> str:
        return output_since(self.output_file, 0)
