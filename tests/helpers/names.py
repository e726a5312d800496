"""Names no other test uses, so tests sharing a cluster never see each other's topics or groups."""

from __future__ import annotations

import uuid


def unique_name(prefix: str) -> str:
    """`prefix` and eight random hex digits, e.g. `orders-1f3a9c2e`."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
