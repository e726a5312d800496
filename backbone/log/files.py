"""File plumbing for the log: segment file handles, the regions handed to readers, durable small files.

A region keeps its `SegmentFile` alive, and a `SegmentFile` closes its descriptor only when the last
reference goes. So when retention deletes a segment (unlinks its path) while a fetch is still sending a
region of it, the region stays readable: on Linux an unlinked file lives on while a descriptor is open.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from backbone.protocol.errors import KafkaStorageError

log = logging.getLogger(__name__)

CHECKPOINT_VERSION = 0


class SegmentFile:
    """An open segment data file, shared by its segment and every region handed out from it.

    Opened read-write in append mode: every write lands at the end whatever the file position is (asyncio's
    sendfile moves the position of the descriptor it is given), and recovery can truncate through it.
    """

    __slots__ = ("_fd", "path")

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd

    @classmethod
    def open(cls, path: Path, *, create: bool = False) -> SegmentFile:
        flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC | (os.O_CREAT | os.O_EXCL if create else 0)
        with storage_errors("open", path):
            return cls(path, os.open(path, flags, 0o644))

    def fileno(self) -> int:
        if self._fd < 0:
            raise ValueError(f"segment file {self.path} is closed")
        return self._fd

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def close(self) -> None:
        """Close now; only for files no region can reference yet (a failed open)."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self, _close: Callable[[int], None] = os.close) -> None:
        # The last reference is gone (the log dropped it and no region holds it): release the descriptor.
        # os.close is bound at definition time: at interpreter exit the os module may already be gone.
        fd, self._fd = self._fd, -1
        if fd >= 0:
            try:
                _close(fd)
            except OSError as exc:
                log.warning("event=segment_file_close_failed path=%s error=%s", self.path, exc)

    def __repr__(self) -> str:
        return f"SegmentFile({str(self.path)!r}, fd={self._fd})"


@dataclass(frozen=True, slots=True)
class FileRegion:
    """`length` bytes at `position` of an open segment file: whole record batches, ready for sendfile."""

    file: SegmentFile
    position: int
    length: int

    def fileno(self) -> int:
        return self.file.fileno()

    def part(self, start: int, length: int) -> FileRegion:
        """The `length` bytes (fewer at the end) from `start` bytes into this region."""
        return FileRegion(self.file, self.position + start, max(0, min(length, self.length - start)))

    def read(self) -> bytes:
        """The region's bytes (a copy in memory)."""
        data = os.pread(self.file.fileno(), self.length, self.position)
        if len(data) != self.length:
            raise KafkaStorageError(
                f"read of {self.file.path} at {self.position} returned {len(data)} of {self.length} bytes "
                "(the segment was truncated)"
            )
        return data

    def readinto(self, buffer: bytearray | memoryview, offset: int = 0) -> int:
        """Copy up to len(buffer) bytes, starting `offset` bytes into the region; return the count."""
        view = memoryview(buffer)[: max(0, self.length - offset)]
        if not view:
            return 0
        return os.preadv(self.file.fileno(), [view], self.position + offset)


@dataclass(frozen=True, slots=True)
class ReadResult:
    """What `Log.read` returns: regions of whole batches in offset order (empty when nothing to read)."""

    regions: tuple[FileRegion, ...]

    @property
    def size(self) -> int:
        return sum(region.length for region in self.regions)

    def to_bytes(self) -> bytes:
        return b"".join(region.read() for region in self.regions)


@contextmanager
def storage_errors(action: str, path: Path | str) -> Iterator[None]:
    """Turn an OSError into KAFKA_STORAGE_ERROR naming the file, keeping the cause chained."""
    try:
        yield
    except OSError as exc:
        raise storage_error(action, path, exc) from exc


def storage_error(action: str, path: Path | str, exc: OSError) -> KafkaStorageError:
    return KafkaStorageError(f"{action} {path} failed: {exc.strerror or exc}")


# The most buffers one writev takes (the kernel's IOV_MAX, 1024 on Linux); more fail with EINVAL.
IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 1024


def write_all(fd: int, buffers: Sequence[bytes | bytearray | memoryview], total: int) -> None:
    """Write every byte of `buffers`: one writev per IOV_MAX buffers (os.writev may write part of them,
    as it does when a disk fills)."""
    if len(buffers) <= IOV_MAX:
        written = os.writev(fd, buffers)
        if written != total:
            write_rest(fd, buffers, written)
        return
    for start in range(0, len(buffers), IOV_MAX):
        chunk = buffers[start : start + IOV_MAX]
        write_all(fd, chunk, sum(len(b) for b in chunk))


def write_rest(fd: int, buffers: Sequence[bytes | bytearray | memoryview], written: int) -> None:
    """Finish a write of which the first `written` bytes got through."""
    rest = memoryview(b"".join(buffers))[written:]
    while rest:
        written = os.write(fd, rest)
        if written == 0:
            # A zero-byte write would loop forever; report it as the disk refusing data.
            raise OSError(28, "write accepted no bytes")
        rest = rest[written:]


def fsync_dir(directory: Path) -> None:
    """Make the directory's entries (created, renamed, deleted files) durable."""
    with storage_errors("fsync directory", directory):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new content, never a mix.

    Writes a temporary file, fsyncs it, renames it over the target and fsyncs the directory.
    """
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            write_all(fd, [data], len(data))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        _remove_quietly(tmp)
        raise storage_error("write", path, exc) from exc
    fsync_dir(path.parent)


def _remove_quietly(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        # The original failure matters more; this one is logged so it is not lost.
        log.warning("event=temp_file_remove_failed path=%s error=%s", path, exc)


def write_checkpoint(path: Path, entries: Sequence[Sequence[object]]) -> None:
    """Write Kafka's checkpoint text format: version line, count line, one space-separated entry a line."""
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines.extend(" ".join(str(field) for field in entry) for entry in entries)
    write_atomically(path, ("\n".join(lines) + "\n").encode())


def read_checkpoint(path: Path, fields: int) -> list[list[str]] | None:
    """Entries of a checkpoint file, None when it does not exist; ValueError when it is malformed."""
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read checkpoint {path}: {exc}") from exc
    lines = text.splitlines()
    if len(lines) < 2 or lines[0].strip() != str(CHECKPOINT_VERSION):
        raise ValueError(f"checkpoint {path} has no version {CHECKPOINT_VERSION} header")
    try:
        count = int(lines[1])
    except ValueError:
        raise ValueError(f"checkpoint {path} has a bad count line {lines[1]!r}") from None
    entries = [line.split() for line in lines[2:] if line.strip()]
    if count != len(entries) or any(len(entry) != fields for entry in entries):
        raise ValueError(f"checkpoint {path} announces {count} entries of {fields} fields, holds {entries!r}")
    return entries


def write_offset_checkpoint(path: Path, topic: str, partition: int, offset: int) -> None:
    """Kafka's offset checkpoint format ("topic partition offset" entries) with this partition's entry."""
    write_checkpoint(path, [(topic, partition, offset)])


def read_offset_checkpoint(path: Path, topic: str, partition: int) -> int | None:
    """This partition's offset from an offset checkpoint; None if absent; ValueError if malformed."""
    entries = read_checkpoint(path, 3)
    if entries is None:
        return None
    for name, number, offset in entries:
        if name == topic and number == str(partition):
            try:
                value = int(offset)
            except ValueError:
                raise ValueError(f"checkpoint {path} has a bad offset {offset!r}") from None
            if value < 0:
                raise ValueError(f"checkpoint {path} has a negative offset {value}")
            return value
    return None
