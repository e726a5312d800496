"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554): users' SCRAM credentials in
ZooKeeper. The client salts and iterates the password; only the derived keys are stored."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from kio.static.primitive import i8, i32

from backbone.broker.handlers.admin_common import ZooKeeperCall
from backbone.broker.handlers.common import response_module, throttle
from backbone.broker.network import Handler, RequestContext
from backbone.coordination import ScramCredential
from backbone.coordination.credentials import DEFAULT_ITERATIONS, MAX_ITERATIONS
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from backbone.broker.security.authorizer import Authorizer
    from backbone.coordination import ClusterStore

# Kafka's ScramMechanism type codes on the wire.
MECHANISM_CODES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
_CODE_OF = {name: code for code, name in MECHANISM_CODES.items()}


def scram_credentials_handlers(
    authorizer: Authorizer, store: ClusterStore, zk: ZooKeeperCall
) -> dict[ApiKey, Handler]:
    async def describe(context: RequestContext) -> Any:
        request = context.decode()
        module = response_module(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, context.api_version)
        if not authorizer.check_cluster(context, "DESCRIBE"):
            return module.DescribeUserScramCredentialsResponse(
                throttle_time=throttle(),
                error_code=ErrorCode.cluster_authorization_failed,
                error_message="DESCRIBE on the cluster is needed",
                results=(),
            )
        if request.users is None or not request.users:
            names = list(await zk(store.scram_users))
            explicit = False
        else:
            names = [u.name for u in request.users]
            explicit = True
        counts = Counter(names)
        results = []
        for name in dict.fromkeys(names):
            error, message, infos = ErrorCode.none, None, ()
            if counts[name] > 1:
                error, message = ErrorCode.duplicate_resource, f"user {name} was named more than once"
            else:
                found = await zk(store.scram_credentials, name)
                if not found and explicit:
                    error, message = (
                        ErrorCode.resource_not_found,
                        f"Attempt to describe a user credential that does not exist: {name}",
                    )
                infos = tuple(
                    module.CredentialInfo(mechanism=i8(_CODE_OF[m]), iterations=i32(c.iterations))
                    for m, c in sorted(found.items())
                )
            results.append(
                module.DescribeUserScramCredentialsResult(
                    user=name, error_code=error, error_message=message, credential_infos=infos
                )
            )
        return module.DescribeUserScramCredentialsResponse(
            throttle_time=throttle(), error_code=ErrorCode.none, error_message=None, results=tuple(results)
        )

    async def alter(context: RequestContext) -> Any:
        request = context.decode()
        module = response_module(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, context.api_version)
        named = Counter(
            (change.name, int(change.mechanism)) for change in (*request.deletions, *request.upsertions)
        )
        outcome: dict[str, tuple[ErrorCode, str | None]] = {}
        allowed = authorizer.check_cluster(context, "ALTER")
        for change in (*request.deletions, *request.upsertions):
            if change.name in outcome:
                continue
            if not allowed:
                outcome[change.name] = (
                    ErrorCode.cluster_authorization_failed,
                    "ALTER on the cluster is needed",
                )
                continue
            outcome[change.name] = await _apply(store, zk, change, named, upsert=change in request.upsertions)
        return module.AlterUserScramCredentialsResponse(
            throttle_time=throttle(),
            results=tuple(
                module.AlterUserScramCredentialsResult(user=user, error_code=code, error_message=message)
                for user, (code, message) in outcome.items()
            ),
        )

    return {
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: describe,
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: alter,
    }


async def _apply(
    store: ClusterStore, zk: ZooKeeperCall, change: Any, named: Counter, *, upsert: bool
) -> tuple[ErrorCode, str | None]:
    mechanism = MECHANISM_CODES.get(int(change.mechanism))
    if not change.name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if mechanism is None:
        return ErrorCode.unsupported_sasl_mechanism, f"Unknown SCRAM mechanism {int(change.mechanism)}"
    if named[(change.name, int(change.mechanism))] > 1:
        return ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request"
    if not upsert:
        removed = await zk(store.delete_scram_credential, change.name, mechanism)
        if not removed:
            return (
                ErrorCode.resource_not_found,
                f"Attempt to delete a user credential that does not exist: {change.name}",
            )
        return ErrorCode.none, None
    if not DEFAULT_ITERATIONS <= int(change.iterations) <= MAX_ITERATIONS:
        return (
            ErrorCode.unacceptable_credential,
            f"iterations must be between {DEFAULT_ITERATIONS} and {MAX_ITERATIONS}, "
            f"got {int(change.iterations)}",
        )
    if not change.salt or not change.salted_password:
        return ErrorCode.unacceptable_credential, "salt and salted password must not be empty"
    credential = ScramCredential.from_salted_password(
        mechanism, bytes(change.salted_password), bytes(change.salt), int(change.iterations)
    )
    await zk(store.set_scram_credential, change.name, mechanism, credential)
    return ErrorCode.none, None
