"""Running the `backbone` command as a user would, for the CLI tests: to completion, or in the background.

Every process started here ends with the test: `run` kills it when its timeout passes (subprocess.run
does), `spawn` kills it on leaving the `with` block, also when the test failed.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

COMMAND = [sys.executable, "-m", "backbone"]


def run(
    *args: str, stdin: bytes = b"", timeout: float = 60.0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """`backbone ARGS...` with `stdin` as its input; stdout and stderr captured as bytes."""
    return subprocess.run(
        [*COMMAND, *args], input=stdin, capture_output=True, timeout=timeout, env=env, check=False
    )


def run_ok(*args: str, stdin: bytes = b"", timeout: float = 60.0) -> bytes:
    """`run`, failing the test (with the command's stderr) unless it exits 0; returns stdout."""
    done = run(*args, stdin=stdin, timeout=timeout)
    assert done.returncode == 0, f"backbone {' '.join(args)} exited {done.returncode}: {done.stderr.decode()}"
    return done.stdout


class Spawned:
    """A `backbone` process running in the background, with what it wrote so far to stdout and stderr."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.out = bytearray()
        self.err = bytearray()
        self._selector = selectors.DefaultSelector()
        assert process.stdout is not None and process.stderr is not None
        self._buffers = {process.stdout.fileno(): self.out, process.stderr.fileno(): self.err}
        for fd in self._buffers:
            os.set_blocking(fd, False)
            self._selector.register(fd, selectors.EVENT_READ)

    def wait_for(self, stream: str, text: bytes, timeout: float = 30.0) -> None:
        """Read output until `text` appears in `stream` ("out" or "err"); fail the test after `timeout` s."""
        buffer = self.out if stream == "out" else self.err
        deadline = time.monotonic() + timeout
        while text not in buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._read(remaining):
                pytest.fail(
                    f"{text!r} did not appear on std{stream} within {timeout} s (exit code "
                    f"{self.process.poll()}); stdout={bytes(self.out)!r} stderr={bytes(self.err)!r}"
                )

    def _read(self, timeout: float) -> bool:
        """Read what is ready within `timeout`; False once both pipes are at their end."""
        if not self._selector.get_map():
            return False
        for key, _ in self._selector.select(timeout):
            chunk = os.read(key.fd, 65536)
            if chunk:
                self._buffers[key.fd].extend(chunk)
            else:
                self._selector.unregister(key.fd)
        return True

    def close(self) -> None:
        self._selector.close()
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()

    def finish(self, timeout: float = 30.0) -> int:
        """Wait for the process to exit (reading its output to the end); its exit code."""
        deadline = time.monotonic() + timeout
        while self._read(max(deadline - time.monotonic(), 0.0)):
            if time.monotonic() >= deadline:
                pytest.fail(f"the process did not exit within {timeout} s; stderr={bytes(self.err)!r}")
        return self.process.wait(max(deadline - time.monotonic(), 0.1))


@contextmanager
def spawn(*args: str) -> Iterator[Spawned]:
    """Start `backbone ARGS...` in the background; it is killed when the block ends, however it ends."""
    process = subprocess.Popen(
        [*COMMAND, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    spawned = Spawned(process)
    try:
        yield spawned
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
        spawned.close()
