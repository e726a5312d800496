"""Broker liveness: every broker probes every other registered broker's listener.

ZooKeeper only drops a killed broker's registration when its session expires (`zookeeper.session.timeout.ms`,
18 s by default): far too long to leave its partitions without a leader. So, as KRaft's broker heartbeats
do, liveness here is the ZooKeeper registration AND an answer to a cheap ApiVersions probe every
`broker.liveness.probe.interval.ms`. A broker is unreachable when its listener refuses connections (the
process is gone: kill -9 resets the probe connection at once, and the reconnect is refused) or has not
answered for `broker.liveness.timeout.ms` while some other broker still answers (one that can reach nobody
suspects itself, not the others). It is reachable again when a probe is answered; a restarted broker
answers only once it has registered (server.py), so an answer means a current registration.

What the probes decide:
- the active controller treats unreachable brokers as dead: leadership moves off them and they leave ISRs;
- any broker that finds the controller unreachable deletes the /controller node, so a new controller is
  elected at once instead of after the dead one's session timeout.

Why this is safe when a probe is wrong (a live broker cut off from the prober only): every leader change
is a versioned, controller-epoch-fenced ZooKeeper write that the old leader learns of through its watch;
its own ISR writes then fail on the version; and a controller that loses /controller is fenced by the epoch
the next election bumps. A wrong probe costs a leader change, never an acknowledged record.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Callable

from backbone.protocol.api import ApiKey
from backbone.protocol.errors import KafkaError
from backbone.wire.connection import BrokerConnection
from backbone.wire.errors import KafkaClientError
from backbone.wire.security import ClientSecurity

log = logging.getLogger(__name__)


class Outcome(enum.Enum):
    ANSWERED = "answered"
    REFUSED = "connection refused"  # nothing listens there: the process is gone
    FAILED = "failed"  # reset, timed out or garbled: maybe gone, maybe a slow or cut-off network


def judge(
    outcome: Outcome, *, in_grace: bool, silent_s: float, timeout_s: float, others_answer: bool
) -> tuple[bool | None, str]:
    """The verdict after one probe: (True) reachable, (False) unreachable or (None) no change, and why.

    A refusal is conclusive at once, except just after the broker registered (it registers a moment before
    its listeners serve). Silence is conclusive after `timeout_s`, but only while some other broker still
    answers: a prober that hears from nobody is more likely cut off itself, and fencing everyone would
    take every partition offline.
    """
    if outcome is Outcome.ANSWERED:
        return True, "answered"
    if outcome is Outcome.REFUSED and not in_grace:
        return False, outcome.value
    if silent_s >= timeout_s and others_answer:
        return False, f"no answer for {silent_s:.1f}s"
    return None, ""


class _Probe:
    def __init__(self, registration_epoch: int) -> None:
        self.registration_epoch = registration_epoch
        self.last_answer = time.monotonic()
        self.grace_until = 0.0  # a fresh registration is not judged by refused connections before this
        self.connection: BrokerConnection | None = None
        self.wake = asyncio.Event()
        self.stopping = False
        self.task: asyncio.Task[None] | None = None


class Liveness:
    """Probes the brokers in `registered()` (other than this one); `unreachable` is the verdict."""

    def __init__(
        self,
        broker_id: int,
        endpoint: Callable[[int], tuple[str, int] | None],
        on_change: Callable[[int, bool], None],
        *,
        interval_ms: int = 500,
        timeout_ms: int = 3000,
        security: ClientSecurity | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.security = security
        self._endpoint = endpoint
        self._on_change = on_change
        self.interval_s = interval_ms / 1000
        self.timeout_s = timeout_ms / 1000
        self.unreachable: set[int] = set()
        self._probes: dict[int, _Probe] = {}

    def track(self, brokers: dict[int, int]) -> None:
        """Probe exactly these brokers (registered ones: id -> registration epoch); forget the rest.

        A new registration is fresh evidence of life: the broker counts as reachable, and for one timeout
        a refused connection is not held against it (it registers just before it starts serving).
        """
        wanted = set(brokers) - {self.broker_id}
        for broker_id in wanted & set(self._probes):
            probe = self._probes[broker_id]
            if probe.registration_epoch != brokers[broker_id]:
                probe.registration_epoch = brokers[broker_id]
                probe.last_answer = time.monotonic()
                probe.grace_until = probe.last_answer + self.timeout_s
                self._verdict(broker_id, reachable=True, reason="registered again")
        for broker_id in set(self._probes) - wanted:
            probe = self._probes.pop(broker_id)
            probe.stopping = True
            if probe.task is not None:
                probe.task.cancel()
            if probe.connection is not None:
                probe.connection.abort()
            self.unreachable.discard(broker_id)
        for broker_id in wanted - set(self._probes):
            probe = self._probes[broker_id] = _Probe(brokers[broker_id])
            probe.grace_until = time.monotonic() + self.timeout_s
            probe.task = asyncio.get_running_loop().create_task(
                self._run(broker_id, probe), name=f"liveness-{broker_id}"
            )

    async def stop(self) -> None:
        probes, self._probes = list(self._probes.values()), {}
        for probe in probes:
            if probe.task is not None:
                # The flag as well as the cancel: Python 3.11's wait_for can swallow a cancellation that
                # arrives as the awaited event fires.
                probe.stopping = True
                probe.wake.set()
                probe.task.cancel()
                await asyncio.wait({probe.task})
            if probe.connection is not None:
                await probe.connection.close()

    def _answered_by_anyone_else(self, broker_id: int) -> bool:
        now = time.monotonic()
        return any(
            other != broker_id and now - probe.last_answer < self.timeout_s
            for other, probe in self._probes.items()
        )

    async def _run(self, broker_id: int, probe: _Probe) -> None:
        while not probe.stopping:
            probe.wake.clear()
            try:
                outcome = await self._probe_once(broker_id, probe)
            except (KafkaClientError, KafkaError, OSError, TimeoutError) as exc:
                log.debug("event=liveness_probe_failed broker_id=%d error=%r", broker_id, str(exc))
                outcome = Outcome.FAILED
                if probe.connection is not None:
                    probe.connection.abort()
                    probe.connection = None
            now = time.monotonic()
            if outcome is Outcome.ANSWERED:
                probe.last_answer = now
            reachable, reason = judge(
                outcome,
                in_grace=now < probe.grace_until,
                silent_s=now - probe.last_answer,
                timeout_s=self.timeout_s,
                others_answer=self._answered_by_anyone_else(broker_id),
            )
            if reachable is not None:
                self._verdict(broker_id, reachable=reachable, reason=reason)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(probe.wake.wait(), self.interval_s)

    async def _probe_once(self, broker_id: int, probe: _Probe) -> Outcome:
        connection = probe.connection
        if connection is None or connection.is_closed:
            address = self._endpoint(broker_id)
            if address is None:
                # Registered without the listener we use: nothing to probe, so its registration is all the
                # evidence there is.
                return Outcome.ANSWERED
            # A bare connect first: BrokerConnection reports a refusal like any other failure, and a refusal
            # is the one certain sign that no process listens there any more.
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection(*address), self.timeout_s)
            except ConnectionRefusedError:
                return Outcome.REFUSED
            writer.close()
            connection = probe.connection = BrokerConnection(
                address[0],
                address[1],
                broker_id,
                client_id=f"broker-{self.broker_id}-liveness",
                request_timeout_ms=int(self.timeout_s * 1000),
                connect_timeout_ms=int(self.timeout_s * 1000),
                max_in_flight=1,
                on_close=lambda _connection, _error: probe.wake.set(),
                security=self.security,
            )
            await connection.connect()  # negotiates ApiVersions: that is the probe
            return Outcome.ANSWERED
        await connection.request_kio(
            ApiKey.API_VERSIONS, client_software_name="backbone", client_software_version="1"
        )
        return Outcome.ANSWERED

    def _verdict(self, broker_id: int, *, reachable: bool, reason: str) -> None:
        if reachable == (broker_id not in self.unreachable):
            return
        if reachable:
            self.unreachable.discard(broker_id)
        else:
            self.unreachable.add(broker_id)
        log.warning(
            "event=broker_%s broker_id=%d reason=%r",
            "reachable" if reachable else "unreachable",
            broker_id,
            reason,
        )
        self._on_change(broker_id, reachable)
