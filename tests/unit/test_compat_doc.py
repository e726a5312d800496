"""docs/compatibility.md is what the generator makes of the API table and the recorded results."""

from __future__ import annotations

import json

import pytest
from kio.schema.index import api_key_map

from backbone.protocol.api import SUPPORTED_VERSIONS, ApiKey
from backbone.protocol.compat_doc import DOC, LEFT_OUT, RESULTS, render

pytestmark = pytest.mark.unit


def test_the_committed_document_is_generated() -> None:
    assert DOC.read_text(encoding="utf-8") == render(RESULTS), (
        "docs/compatibility.md is stale: run python -m backbone.protocol.compat_doc (or ops/conformance)"
    )


def test_every_api_not_served_says_why() -> None:
    served = {int(key) for key in SUPPORTED_VERSIONS}
    assert {key for key in api_key_map if key not in served and api_key_map[key] not in LEFT_OUT} == set()
    assert {api_key_map[int(key)] for key in ApiKey} & set(LEFT_OUT) == set()


def test_result_files_render_in_their_sections(tmp_path) -> None:
    record = {
        "client": "rdkafka (Rust crate)",
        "version": "0.36.2",
        "suite": "rdkafka tests",
        "passed": 5,
        "failed": 1,
        "skipped": 2,
        "left_out": [{"test": "txn_basic", "reason": "transactions"}],
        "failures": [{"test": "fetch_big", "reason": "timed out"}],
    }
    (tmp_path / "rust.json").write_text(json.dumps(record))
    text = render(tmp_path)
    theirs = text[text.index("## Clients' own test suites") :]
    assert "| rdkafka (Rust crate) | 0.36.2 | rdkafka tests | 5 | 1 | 2 | 1 |" in theirs
    assert "- `txn_basic`: transactions" in theirs and "- FAILED `fetch_big`: timed out" in theirs
