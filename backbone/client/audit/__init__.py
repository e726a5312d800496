"""The completeness audit's client side: what every tier and every reader of the audit topic shares.

- `counts`: `AuditCount` (one count message), `AuditCounter` and `AuditPublisher` (count per topic and time
  bucket, publish the deltas);
- `reading`: `read_audit_counts`, every count message in the audit topic;
- `report`: `summarize` and its renderings, the report's arithmetic (pure functions over count messages).

The mirror, the `audit` command, the console and the Spark jobs import these; the cluster tier's
`ClusterAuditor` lives with the mirror (`backbone/mirror/audit.py`).
"""

from backbone.client.audit.counts import (
    DEFAULT_BUCKET_MS,
    DEFAULT_INTERVAL_MS,
    DEFAULT_TOPIC,
    AuditCount,
    AuditCounter,
    AuditPublisher,
    bucket_start,
    process_id,
)
from backbone.client.audit.reading import read_audit_counts
from backbone.client.audit.report import Report, format_percent, format_time, render_text, summarize, to_json

__all__ = [
    "DEFAULT_BUCKET_MS",
    "DEFAULT_INTERVAL_MS",
    "DEFAULT_TOPIC",
    "AuditCount",
    "AuditCounter",
    "AuditPublisher",
    "Report",
    "bucket_start",
    "format_percent",
    "format_time",
    "process_id",
    "read_audit_counts",
    "render_text",
    "summarize",
    "to_json",
]
