"""The warehouse's layout and its commit protocol, on any file system Hadoop's layer accepts.

    <warehouse>/<topic>/dt=YYYY-MM-DD/hour=HH/part-<run>-*.parquet    the data, by event time
    <warehouse>/<topic>/dt=YYYY-MM-DD/hour=HH/_COMPLETE               the audit found the hour complete
    <warehouse>/_quarantine/<topic>/run=<run>/*.parquet               records that did not decode
    <warehouse>/_etl/staging/run-<run>/...                            a run's files while it writes
    <warehouse>/_etl/manifests/run-<run>.json                         a committed run

Exactly once without a database: a run writes its files under staging, then commits by renaming one
manifest into `_etl/manifests/` (atomic). The manifest names the offsets the run consumed and carries the
position of every partition forward, lists each staged file and where it goes, and holds the run's counts.
Only after the commit are the files moved into the hours (then `.published` is written beside the
manifest). A run that dies before its commit left only staging, which the next run deletes and redoes
from the last committed offsets; one that dies after it is rolled forward by the next run (the moves are
repeated where not yet done). A later run starts at the positions of the latest committed manifest.
"""

from __future__ import annotations

import json
from typing import Any

ETL = "_etl"
MANIFESTS = f"{ETL}/manifests"
STAGING = f"{ETL}/staging"
QUARANTINE = "_quarantine"
PENDING = f"{ETL}/pending_hours.json"


def run_name(run: int) -> str:
    return f"run-{run:06d}"


class Files:
    """Driver-side file operations through Hadoop's FileSystem, relative to the warehouse root."""

    def __init__(self, spark: Any, root: str) -> None:
        self.jvm = spark._jvm
        self.Path = self.jvm.org.apache.hadoop.fs.Path
        self.root = root.rstrip("/")
        self.fs = self.Path(self.root).getFileSystem(spark._jsc.hadoopConfiguration())

    def url(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    def _path(self, relative: str) -> Any:
        return self.Path(self.url(relative))

    def exists(self, relative: str) -> bool:
        return bool(self.fs.exists(self._path(relative)))

    def read_text(self, relative: str) -> str:
        stream = self.fs.open(self._path(relative))
        try:
            return str(self.jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def write_text(self, relative: str, text: str) -> None:
        out = self.fs.create(self._path(relative), True)
        try:
            out.write(bytearray(text.encode()))
        finally:
            out.close()

    def write_atomically(self, relative: str, text: str) -> None:
        """Write beside the target, then rename over it: readers see the old or the new text, never part."""
        folder, _, name = relative.rpartition("/")
        temporary = f"{folder}/.{name}.tmp" if folder else f".{name}.tmp"
        self.write_text(temporary, text)
        if self.exists(relative):
            self.fs.delete(self._path(relative), False)
        self.rename(temporary, relative)

    def rename(self, source: str, target: str) -> None:
        self.fs.mkdirs(self._path(target).getParent())
        if not self.fs.rename(self._path(source), self._path(target)):
            raise OSError(f"could not rename {self.url(source)} to {self.url(target)}")

    def names(self, relative: str) -> list[str]:
        if not self.exists(relative):
            return []
        return sorted(str(s.getPath().getName()) for s in self.fs.listStatus(self._path(relative)))

    def files_under(self, relative: str) -> list[str]:
        """Every data file below `relative`, relative to it (_SUCCESS, checksums and _temporary left out)."""
        if not self.exists(relative):
            return []
        found = []
        base = self._path(relative).toUri().getPath().rstrip("/")
        listing = self.fs.listFiles(self._path(relative), True)
        while listing.hasNext():
            path = str(listing.next().getPath().toUri().getPath())
            inner = path[len(base) + 1 :]
            parts = inner.split("/")
            if not parts[-1].startswith(("_", ".")) and "_temporary" not in parts:  # _SUCCESS, .crc files
                found.append(inner)
        return sorted(found)

    def delete(self, relative: str) -> None:
        if self.exists(relative):
            self.fs.delete(self._path(relative), True)


class Manifests:
    def __init__(self, files: Files) -> None:
        self.files = files

    def committed(self) -> list[int]:
        return sorted(
            int(name[4:10])
            for name in self.files.names(MANIFESTS)
            if name.startswith("run-") and name.endswith(".json")
        )

    def read(self, run: int) -> dict[str, Any]:
        return json.loads(self.files.read_text(f"{MANIFESTS}/{run_name(run)}.json"))

    def latest(self) -> dict[str, Any] | None:
        runs = self.committed()
        return self.read(runs[-1]) if runs else None

    def commit(self, manifest: dict[str, Any]) -> None:
        """The commit point: one rename makes the run's manifest (and so its offsets and files) exist."""
        name = run_name(manifest["run"])
        self.files.write_text(f"{MANIFESTS}/.{name}.json.tmp", json.dumps(manifest, indent=1))
        self.files.rename(f"{MANIFESTS}/.{name}.json.tmp", f"{MANIFESTS}/{name}.json")

    def mark(self, run: int, what: str) -> None:
        self.files.write_text(f"{MANIFESTS}/{run_name(run)}.{what}", "")

    def is_marked(self, run: int, what: str) -> bool:
        return self.files.exists(f"{MANIFESTS}/{run_name(run)}.{what}")

    def publish(self, manifest: dict[str, Any]) -> None:
        """Move a committed run's staged files into place (again, after a crash: moves done are skipped)."""
        for entry in manifest["files"]:
            if self.files.exists(entry["staged"]):
                self.files.rename(entry["staged"], entry["final"])
            elif not self.files.exists(entry["final"]):
                raise OSError(
                    f"{entry['final']} of committed run {manifest['run']} is missing from staging too"
                )
        self.mark(manifest["run"], "published")
        self.files.delete(f"{STAGING}/{run_name(manifest['run'])}")

    def recover(self) -> list[dict[str, Any]]:
        """Roll committed runs forward, throw uncommitted staging away; returns the committed manifests
        whose audit counts may not have been published yet."""
        committed = set(self.committed())
        for run in sorted(committed):
            if not self.is_marked(run, "published"):
                self.publish(self.read(run))
        for name in self.files.names(STAGING):
            if name.startswith("run-") and int(name[4:]) not in committed:
                self.files.delete(f"{STAGING}/{name}")  # a run that died before its commit
        return [self.read(run) for run in sorted(committed) if not self.is_marked(run, "audited")]
