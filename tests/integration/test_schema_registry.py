"""The schema registry against a real broker: Confluent's own client and Avro serdes work against it,
compatibility is enforced with Confluent's error codes, and the schemas survive a restart (same ids) and
are shared by a second instance, which forwards its writes to the instance holding the lease."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext
from registry_support import call, lease_expiry_ms, running_registry

from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.integration

PAGE_VIEW_V1 = {
    "type": "record",
    "name": "PageView",
    "namespace": "test",
    "fields": [{"name": "member", "type": "long"}, {"name": "page", "type": "string"}],
}
# A new field with a default: readers of v2 can read v1 data (BACKWARD compatible).
PAGE_VIEW_V2 = {
    **PAGE_VIEW_V1,
    "fields": [*PAGE_VIEW_V1["fields"], {"name": "ms", "type": "long", "default": 0}],
}
# A new field without a default: v3 cannot read v2 data.
PAGE_VIEW_BAD = {**PAGE_VIEW_V1, "fields": [*PAGE_VIEW_V1["fields"], {"name": "host", "type": "string"}]}


def avro(schema: dict) -> Schema:
    return Schema(json.dumps(schema), "AVRO")


def test_confluent_avro_serdes_round_trip(broker, tmp_path):
    with running_registry(tmp_path, broker.bootstrap) as url:
        client = SchemaRegistryClient({"url": url})
        serializer = AvroSerializer(client, json.dumps(PAGE_VIEW_V1))
        context = SerializationContext("pageviews", MessageField.VALUE)
        payload = serializer({"member": 42, "page": "/home"}, context)
        assert payload[0] == 0  # Confluent's wire format: magic byte, then the schema id
        schema_id = int.from_bytes(payload[1:5], "big")
        assert client.get_subjects() == ["pageviews-value"]
        assert client.get_latest_version("pageviews-value").schema_id == schema_id

        reader = AvroDeserializer(SchemaRegistryClient({"url": url}))  # a fresh client: no cache
        assert reader(payload, context) == {"member": 42, "page": "/home"}

        # The same schema under another subject keeps its id; a lookup finds it under both.
        assert client.register_schema("other-value", avro(PAGE_VIEW_V1)) == schema_id
        assert client.lookup_schema("other-value", avro(PAGE_VIEW_V1)).version == 1
        versions = call("GET", f"{url}/schemas/ids/{schema_id}/versions")[1]
        assert versions == [
            {"subject": "other-value", "version": 1},
            {"subject": "pageviews-value", "version": 1},
        ]


def test_compatibility_levels_and_errors(broker, tmp_path):
    with running_registry(tmp_path, broker.bootstrap) as url:
        client = SchemaRegistryClient({"url": url})
        first = client.register_schema("pv", avro(PAGE_VIEW_V1))
        assert client.get_compatibility() == "BACKWARD"
        assert client.test_compatibility("pv", avro(PAGE_VIEW_V2)) is True
        assert client.test_compatibility("pv", avro(PAGE_VIEW_BAD)) is False
        second = client.register_schema("pv", avro(PAGE_VIEW_V2))
        assert second != first

        with pytest.raises(SchemaRegistryError) as refused:
            client.register_schema("pv", avro(PAGE_VIEW_BAD))
        assert (refused.value.http_status_code, refused.value.error_code) == (409, 409)

        # FORWARD: the old schema must read the new one's data; dropping a field with no default breaks it.
        client.set_compatibility("pv", "FORWARD_TRANSITIVE")
        assert client.get_compatibility("pv") == "FORWARD_TRANSITIVE"
        assert client.test_compatibility("pv", avro(PAGE_VIEW_BAD)) is True
        client.set_compatibility("pv", "NONE")
        third = client.register_schema("pv", avro({**PAGE_VIEW_V1, "fields": [PAGE_VIEW_V1["fields"][0]]}))
        assert client.get_versions("pv") == [1, 2, 3]
        assert client.get_version("pv", 3).schema_id == third

        def error_code(method: str, path: str, body: object = None) -> tuple[int, int]:
            status, answer = call(method, url + path, body)
            return status, answer["error_code"]

        assert error_code("GET", "/subjects/missing/versions") == (404, 40401)
        assert error_code("GET", "/subjects/pv/versions/9") == (404, 40402)
        assert error_code("GET", "/schemas/ids/999") == (404, 40403)
        assert error_code("POST", "/subjects/pv/versions", {"schema": '{"type": 1}'}) == (422, 42201)
        assert error_code("GET", "/subjects/pv/versions/zero") == (422, 42202)
        assert error_code("PUT", "/config", {"compatibility": "SIDEWAYS"}) == (422, 42203)

        # Soft delete, then hard delete; a hard delete first is refused.
        assert error_code("DELETE", "/subjects/pv?permanent=true") == (404, 40405)
        assert client.delete_subject("pv") == [1, 2, 3]
        assert "pv" not in client.get_subjects()
        assert error_code("GET", "/subjects/pv/versions") == (404, 40401)
        assert call("GET", f"{url}/subjects/pv/versions?deleted=true")[1] == [1, 2, 3]
        assert client.delete_subject("pv", permanent=True) == [1, 2, 3]
        assert call("GET", f"{url}/subjects?deleted=true")[1] == []
        assert client.get_schema(first).schema_str  # ids stay readable: data written with them still exists


def test_restarted_and_second_instances_serve_the_same_ids(broker, tmp_path):
    with running_registry(tmp_path / "a", broker.bootstrap, kill=True) as url:
        client = SchemaRegistryClient({"url": url})
        ids = {
            subject: client.register_schema(subject, avro(schema))
            for subject, schema in (("a", PAGE_VIEW_V1), ("b", PAGE_VIEW_V2))
        }
    with running_registry(tmp_path / "b", broker.bootstrap) as url:
        # The first instance was SIGKILLed while holding the lease: this one serves reads at once and
        # takes over writes when that lease expires.
        client = SchemaRegistryClient({"url": url})
        assert {s: client.get_latest_version(s).schema_id for s in ("a", "b")} == ids
        with running_registry(tmp_path / "c", broker.bootstrap) as second_url:
            third_id = client.register_schema("c", avro(PAGE_VIEW_BAD))
            # The second instance forwards its write to the leader and serves the same id.
            second = SchemaRegistryClient({"url": second_url})
            assert second.register_schema("c", avro(PAGE_VIEW_BAD)) == third_id
            assert second.register_schema("d", avro({"type": "string"})) == third_id + 1
            assert client.get_latest_version("d").schema_id == third_id + 1


def test_an_idle_leader_reads_what_the_next_leader_wrote(broker, tmp_path):
    # A leader stops reading the topic while its lease is fresh (only its own writes could be there); it
    # must read again before the lease can pass to another instance, or it would serve stale reads.
    with (
        running_registry(tmp_path / "a", broker.bootstrap, lease_ms=1000) as first_url,
        running_registry(tmp_path / "b", broker.bootstrap, lease_ms=1000) as second_url,
    ):
        first = SchemaRegistryClient({"url": first_url})
        first_id = first.register_schema("a", avro(PAGE_VIEW_V1))
        wait_until(lambda: time.time() * 1000 > lease_expiry_ms(broker.bootstrap) + 50, 30, 0.2, "the lease")
        second_id = SchemaRegistryClient({"url": second_url}).register_schema("b", avro(PAGE_VIEW_V2))
        assert second_id == first_id + 1
        assert (
            "event=schemas_lease_claimed" in (tmp_path / "b" / "schema-registry" / "registry.out").read_text()
        )
        wait_until(
            lambda: call("GET", f"{first_url}/schemas/ids/{second_id}")[0] == 200, 10, 0.05, "b's id at a"
        )
        assert call("GET", f"{first_url}/subjects")[1] == ["a", "b"]
