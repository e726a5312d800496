"""The REST API of Confluent's Schema Registry, as its clients (SchemaRegistryClient, Avro serdes) call it.

Reads are served from this instance's state; writes go through `SchemaLog.write`, and when another
instance holds the leader lease the request is forwarded to it unchanged (a forwarded request that finds
no leader here answers 50003 rather than bouncing on).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from backbone.schema_registry import compatibility, errors
from backbone.schema_registry.state import RegistryState, parse_version
from backbone.schema_registry.store import NotLeader, SchemaLog

log = logging.getLogger(__name__)

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
FORWARDED = "X-Backbone-Registry-Forwarded"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def reply(body: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(body), status=status, content_type=CONTENT_TYPE.split(";")[0])


@web.middleware
async def registry_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except errors.RegistryError as error:
        return reply(error.body(), error.status)


def flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() == "true"


async def body_of(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise errors.bad_request("the request body is not JSON") from None
    if not isinstance(body, dict):
        raise errors.bad_request("the request body must be a JSON object")
    return body


def schema_text(body: dict[str, Any]) -> str:
    kind = body.get("schemaType", "AVRO") or "AVRO"
    if kind != "AVRO":
        raise errors.invalid_schema(f"schemaType {kind} is not supported here; this registry holds AVRO only")
    if body.get("references"):
        raise errors.invalid_schema("schema references are not supported; inline the referenced types")
    return compatibility.canonical(body.get("schema"))


class RegistryApp:
    def __init__(self, store: SchemaLog) -> None:
        self.store = store
        self.state: RegistryState = store.state
        self.session: aiohttp.ClientSession | None = None

    def build(self) -> web.Application:
        app = web.Application(middlewares=[registry_errors])
        get, post, put, delete = web.get, web.post, web.put, web.delete
        app.add_routes(
            [
                get("/", self.root),
                get("/subjects", self.list_subjects),
                post("/subjects/{subject}", self.lookup),
                delete("/subjects/{subject}", self.writes(self.delete_subject)),
                get("/subjects/{subject}/versions", self.list_versions),
                post("/subjects/{subject}/versions", self.writes(self.register)),
                get("/subjects/{subject}/versions/{version}", self.get_version),
                get("/subjects/{subject}/versions/{version}/schema", self.get_version_schema),
                get("/subjects/{subject}/versions/{version}/referencedby", self.referenced_by),
                delete("/subjects/{subject}/versions/{version}", self.writes(self.delete_version)),
                get("/schemas/types", self.types),
                get("/schemas/ids/{id}", self.get_schema),
                get("/schemas/ids/{id}/schema", self.get_schema_text),
                get("/schemas/ids/{id}/subjects", self.schema_subjects),
                get("/schemas/ids/{id}/versions", self.schema_versions),
                get("/config", self.get_config),
                put("/config", self.writes(self.put_config)),
                get("/config/{subject}", self.get_config),
                put("/config/{subject}", self.writes(self.put_config)),
                delete("/config/{subject}", self.writes(self.delete_config)),
                post("/compatibility/subjects/{subject}/versions/{version}", self.check),
                post("/compatibility/subjects/{subject}/versions", self.check),
                get("/mode", self.mode),
                get("/mode/{subject}", self.mode),
            ]
        )
        app.on_cleanup.append(self._close_session)
        return app

    async def _close_session(self, _app: web.Application) -> None:
        if self.session is not None:
            await self.session.close()

    # -- writes: as the leader, or forwarded to it --------------------------------------------------------

    def writes(self, handler: Callable[[web.Request], Awaitable[Any]]) -> Handler:
        async def leader_or_forward(request: web.Request) -> web.StreamResponse:
            for attempt in (1, 2):
                try:
                    async with self.store.writing():
                        await self.store.lead()  # the state is current once this instance leads
                        try:
                            body = await handler(request)
                        finally:
                            staged = self.store.take_staged()
                    await self.store.confirm(staged)
                    return reply(body)
                except NotLeader as not_leader:
                    if request.headers.get(FORWARDED):
                        raise errors.forwarding_error(f"this instance does not lead ({not_leader})") from None
                    lease = not_leader.lease
                    try:
                        return await self.forward(request, lease.url)
                    except errors.RegistryError:
                        # A leader that does not answer (stopped, killed) keeps its lease until it expires;
                        # wait for that once, within the store timeout, then claim the lease here.
                        wait_s = lease.expires_at_ms / 1000 - time.time()
                        if attempt == 2 or wait_s > self.store.timeout_s:
                            raise
                        log.info("event=schemas_leader_unreachable url=%s wait_s=%.1f", lease.url, wait_s)
                        await asyncio.sleep(max(wait_s, 0) + 0.05)
            raise AssertionError("unreachable")

        return leader_or_forward

    async def forward(self, request: web.Request, leader_url: str) -> web.Response:
        if self.session is None:
            self.session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.store.timeout_s * 2)
            )
        try:
            async with self.session.request(
                request.method,
                leader_url.rstrip("/") + request.rel_url.path_qs,
                data=await request.read(),
                headers={"Content-Type": CONTENT_TYPE, FORWARDED: self.store.instance},
            ) as answer:
                return web.Response(body=await answer.read(), status=answer.status, content_type=CONTENT_TYPE)
        except (aiohttp.ClientError, TimeoutError) as error:
            raise errors.forwarding_error(f"{leader_url}: {error!r}") from None

    async def register(self, request: web.Request) -> dict[str, Any]:
        subject = request.match_info["subject"]
        text = schema_text(await body_of(request))
        schema_id, version = self.state.plan_registration(subject, text)
        if version is not None:
            record = {
                "subject": subject,
                "version": version,
                "id": schema_id,
                "schema": text,
                "deleted": False,
            }
            await self.store.stage([({"keytype": "SCHEMA", "subject": subject, "version": version}, record)])
            log.info("event=schema_registered subject=%s version=%d id=%d", subject, version, schema_id)
        return {"id": schema_id}

    async def delete_subject(self, request: web.Request) -> list[int]:
        subject = request.match_info["subject"]
        every = self.state.versions(subject, deleted=True)
        if flag(request, "permanent"):
            if any(not v.deleted for v in every.values()):
                raise errors.subject_not_soft_deleted(subject)
            records: list[tuple[dict[str, Any], dict[str, Any] | None]] = [
                (self._key(subject, n), None) for n in every
            ]
        else:
            live = {n: v for n, v in every.items() if not v.deleted}
            if not live:
                raise errors.subject_soft_deleted(subject)
            records = [
                (self._key(subject, n), self._record(subject, n, v.schema_id, True)) for n, v in live.items()
            ]
        await self.store.stage(records)
        return sorted(key["version"] for key, _ in records)

    async def delete_version(self, request: web.Request) -> int:
        subject = request.match_info["subject"]
        number, version = self.state.version(subject, request.match_info["version"], deleted=True)
        if flag(request, "permanent"):
            if not version.deleted:
                raise errors.version_not_soft_deleted(subject, number)
            await self.store.stage([(self._key(subject, number), None)])
        else:
            if version.deleted:
                raise errors.version_soft_deleted(subject, number)
            await self.store.stage(
                [(self._key(subject, number), self._record(subject, number, version.schema_id, True))]
            )
        return number

    async def put_config(self, request: web.Request) -> dict[str, str]:
        level = compatibility.check_level((await body_of(request)).get("compatibility"))
        subject = request.match_info.get("subject")
        await self.store.stage([({"keytype": "CONFIG", "subject": subject}, {"compatibilityLevel": level})])
        return {"compatibility": level}

    async def delete_config(self, request: web.Request) -> dict[str, str]:
        subject = request.match_info["subject"]
        if subject not in self.state.levels:
            raise errors.subject_not_found(subject)
        previous = self.state.levels[subject]
        await self.store.stage([({"keytype": "CONFIG", "subject": subject}, None)])
        return {"compatibilityLevel": previous}

    @staticmethod
    def _key(subject: str, version: int) -> dict[str, Any]:
        return {"keytype": "SCHEMA", "subject": subject, "version": version}

    def _record(self, subject: str, version: int, schema_id: int, deleted: bool) -> dict[str, Any]:
        return {
            "subject": subject,
            "version": version,
            "id": schema_id,
            "schema": self.state.schemas[schema_id],
            "deleted": deleted,
        }

    # -- reads ----------------------------------------------------------------------------------------------

    async def root(self, _request: web.Request) -> web.Response:
        return reply({})

    async def types(self, _request: web.Request) -> web.Response:
        return reply(["AVRO"])

    async def mode(self, _request: web.Request) -> web.Response:
        return reply({"mode": "READWRITE"})

    async def list_subjects(self, request: web.Request) -> web.Response:
        return reply(self.state.subject_names(flag(request, "deleted")))

    async def list_versions(self, request: web.Request) -> web.Response:
        return reply(list(self.state.versions(request.match_info["subject"], flag(request, "deleted"))))

    def _version_body(self, request: web.Request) -> dict[str, Any]:
        subject = request.match_info["subject"]
        number, version = self.state.version(subject, request.match_info["version"], flag(request, "deleted"))
        return {
            "subject": subject,
            "version": number,
            "id": version.schema_id,
            "schema": self.state.schemas[version.schema_id],
        }

    async def get_version(self, request: web.Request) -> web.Response:
        return reply(self._version_body(request))

    async def get_version_schema(self, request: web.Request) -> web.Response:
        return web.Response(text=self._version_body(request)["schema"], content_type="application/json")

    async def referenced_by(self, request: web.Request) -> web.Response:
        self._version_body(request)
        return reply([])  # references are not supported, so nothing refers to a version

    async def lookup(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        text = schema_text(await body_of(request))
        number, schema_id = self.state.lookup(subject, text, flag(request, "deleted"))
        return reply({"subject": subject, "version": number, "id": schema_id, "schema": text})

    def _schema_id(self, request: web.Request) -> int:
        try:
            schema_id = int(request.match_info["id"])
        except ValueError:
            raise errors.schema_not_found(f"Schema {request.match_info['id']} not found") from None
        if schema_id not in self.state.schemas:
            raise errors.schema_not_found(f"Schema {schema_id} not found")
        return schema_id

    async def get_schema(self, request: web.Request) -> web.Response:
        return reply({"schema": self.state.schemas[self._schema_id(request)]})

    async def get_schema_text(self, request: web.Request) -> web.Response:
        return web.Response(
            text=self.state.schemas[self._schema_id(request)], content_type="application/json"
        )

    async def schema_subjects(self, request: web.Request) -> web.Response:
        found = self.state.subjects_of(self._schema_id(request), flag(request, "deleted"))
        return reply(sorted({subject for subject, _ in found}))

    async def schema_versions(self, request: web.Request) -> web.Response:
        found = self.state.subjects_of(self._schema_id(request), flag(request, "deleted"))
        return reply([{"subject": subject, "version": version} for subject, version in found])

    async def get_config(self, request: web.Request) -> web.Response:
        subject = request.match_info.get("subject")
        if subject is not None and subject not in self.state.levels and not flag(request, "defaultToGlobal"):
            raise errors.subject_config_not_found(subject)
        return reply({"compatibilityLevel": self.state.level(subject)})

    async def check(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        text = schema_text(await body_of(request))
        level = self.state.level(subject)
        wanted = request.match_info.get("version")
        if wanted is None:  # against every version the level looks at
            try:
                live = self.state.versions(subject)
            except errors.RegistryError:
                live = {}
            earlier = [self.state.schemas[v.schema_id] for v in live.values()]
            found = compatibility.problems(level, text, earlier)
        else:
            parse_version(wanted)
            _, version = self.state.version(subject, wanted)
            found = compatibility.problems(
                level.removesuffix("_TRANSITIVE"), text, [self.state.schemas[version.schema_id]]
            )
        body: dict[str, Any] = {"is_compatible": not found}
        if flag(request, "verbose"):
            body["messages"] = found
        return reply(body)
