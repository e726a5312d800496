"""The registry's state as rebuilt from `_schemas` records, and the compatibility levels, without a broker."""

from __future__ import annotations

import json

import pytest

from backbone.schema_registry import compatibility, errors
from backbone.schema_registry.state import RegistryState

pytestmark = pytest.mark.unit

V1 = json.dumps({"type": "record", "name": "E", "fields": [{"name": "a", "type": "int"}]})
V2 = json.dumps(
    {
        "type": "record",
        "name": "E",
        "fields": [{"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 0}],
    }
)
V3_NO_DEFAULT = json.dumps(
    {"type": "record", "name": "E", "fields": [{"name": "a", "type": "int"}, {"name": "c", "type": "string"}]}
)


def schema_record(state: RegistryState, subject: str, version: int, schema_id: int, text: str) -> None:
    state.apply(
        {"keytype": "SCHEMA", "subject": subject, "version": version},
        {"subject": subject, "version": version, "id": schema_id, "schema": compatibility.canonical(text)},
    )


def lease(state: RegistryState, instance: str, claimed: int, expires: int) -> None:
    state.apply(
        {"keytype": "LEASE"},
        {
            "instance": instance,
            "url": f"http://{instance}",
            "claimed_at_ms": claimed,
            "expires_at_ms": expires,
        },
    )


def test_a_lease_changes_hands_only_after_it_expires() -> None:
    state = RegistryState()
    lease(state, "a", 1000, 2000)
    lease(state, "b", 1500, 2500)  # a racing claim while a's lease runs: ignored by every reader
    assert state.lease.instance == "a"
    lease(state, "a", 1800, 2800)  # a renewal
    lease(state, "b", 2500, 3500)
    assert state.lease.instance == "a"
    lease(state, "b", 2800, 3800)
    assert (state.lease.instance, state.lease.expires_at_ms) == ("b", 3800)


def test_the_first_writer_of_an_id_wins_and_plans_follow_the_state() -> None:
    state = RegistryState()
    schema_record(state, "s", 1, 1, V1)
    schema_record(state, "t", 1, 1, V2)  # the same id for another schema: a zombie writer's record
    assert state.schemas[1] == compatibility.canonical(V1) and "t" not in state.subject_names()
    assert state.plan_registration("s", compatibility.canonical(V1)) == (1, None)  # already there
    assert state.plan_registration("s", compatibility.canonical(V2)) == (2, 2)
    assert state.plan_registration("u", compatibility.canonical(V1)) == (1, 1)  # same schema, same id
    with pytest.raises(errors.RegistryError) as refused:
        state.plan_registration("s", compatibility.canonical(V3_NO_DEFAULT))
    assert refused.value.code == 409


@pytest.mark.parametrize(
    ("level", "existing", "new", "ok"),
    [
        ("BACKWARD", [V1], V2, True),
        ("BACKWARD", [V1], V3_NO_DEFAULT, False),
        ("FORWARD", [V2], V1, True),  # v2 data read by v1: the extra field is skipped
        ("FORWARD", [V3_NO_DEFAULT], V1, False),  # v1 data lacks c, which v3 needs
        ("FULL", [V1], V2, True),
        ("FULL", [V1], V3_NO_DEFAULT, False),
        ("BACKWARD", [V3_NO_DEFAULT, V1], V2, True),  # only the latest counts
        ("BACKWARD_TRANSITIVE", [V3_NO_DEFAULT, V1], V2, True),  # V2 ignores c, reads both
        ("FORWARD_TRANSITIVE", [V3_NO_DEFAULT, V1], V2, False),  # V3 cannot read V2 data (no c)
        ("NONE", [V1], json.dumps({"type": "string"}), True),
    ],
)
def test_compatibility_levels(level: str, existing: list[str], new: str, ok: bool) -> None:
    found = compatibility.problems(
        level, compatibility.canonical(new), [compatibility.canonical(e) for e in existing]
    )
    assert (not found) == ok, found


def test_invalid_schemas_and_levels_get_confluents_codes() -> None:
    for bad in ("", '{"type": "record"}', '{"type": "nope"}', "not json"):
        with pytest.raises(errors.RegistryError) as refused:
            compatibility.canonical(bad)
        assert refused.value.code == 42201
    with pytest.raises(errors.RegistryError) as refused:
        compatibility.check_level("SIDEWAYS")
    assert refused.value.code == 42203
