"""The sampler's connection to one cluster: kafka-python's connection manager and IO thread, used to send a
batch of requests to many brokers at once and wait for all answers until one deadline.

A broker that does not answer (paused: the socket stays open but silent; killed: refused) costs at most the
deadline; its outcome carries the error. Every batch tries every broker again (no reconnect backoff carried
over from earlier batches), so a broker is read in the first cycle after it returns. Every request handed to a
connection is counted (``on_request``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import kafka.errors as Errors
from kafka.future import Future
from kafka.net.manager import KafkaConnectionManager
from kafka.net.selector import NetworkSelector

from replmon.core.config import ClusterConfig
from replmon.core.errors import ReplmonError, describe
from replmon.core.kafka_diagnose import probe, refusal, unreachable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Call:
    broker: int
    request: Any
    label: str
    """What the request asks, for logs and metrics (e.g. ``ListOffsets/hw``)."""


@dataclass
class Outcome:
    call: Call
    response: Any = None
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.response is not None


@dataclass
class Pending:
    """Calls sent by :meth:`ClusterClient.submit`, their answers still to come."""

    calls: list[Call]
    futures: list[Future]
    deadline: float
    """time.monotonic() after which an unanswered call fails."""
    timeout_s: float = 0.0
    """How long the calls were given: what an unanswered call's error says."""


class ClusterClient:
    def __init__(self, cluster: ClusterConfig, request_timeout_ms: int, client_id: str,
                 on_request: Callable[[str, int], None] = lambda _label, _broker: None) -> None:
        self.cluster = cluster
        self.request_timeout_ms = request_timeout_ms
        self.on_request = on_request
        self._config: dict[str, Any] = {
            "bootstrap_servers": list(cluster.bootstrap_servers), "client_id": client_id,
            "request_timeout_ms": request_timeout_ms,
            "socket_connection_setup_timeout_ms": request_timeout_ms,
            "socket_connection_setup_timeout_max_ms": max(request_timeout_ms, 10_000),
            "reconnect_backoff_ms": 100, "reconnect_backoff_max_ms": 5_000,
            "max_in_flight_requests_per_connection": 16,
            "receive_message_max_bytes": 256 * 1024 * 1024,
            "metadata_max_age_ms": 300_000,
            **cluster.security.kafka_python(),
        }
        self._net: Any = None
        self._manager: Any = None

    # ------------------------------------------------------------------ lifecycle
    def connect(self, timeout_ms: int | None = None) -> None:
        """Bootstrap: one clear ReplmonError when the cluster cannot be reached or refuses us."""
        self.close()
        reachable, failures = probe(self.cluster.bootstrap_servers)
        if not reachable:
            raise ReplmonError(f"cluster {self.cluster.name}: {unreachable(failures)}")
        self._net = NetworkSelector(**self._config)
        self._net.start()
        self._manager = KafkaConnectionManager(self._net, **self._config)
        try:
            self._manager.bootstrap(timeout_ms or max(self.request_timeout_ms, 5_000))
        except Exception as exc:
            reason = self._diagnose(exc)
            self.close()
            raise ReplmonError(f"cluster {self.cluster.name}: {reason}") from None

    def close(self) -> None:
        manager, net = self._manager, self._net
        self._manager = self._net = None
        if manager is not None:
            try:
                net.run(_close_manager, manager)
            except Exception as exc:
                log.debug("closing connections: %s", exc)
        if net is not None:
            try:
                net.stop(timeout_ms=2000)
            except Exception as exc:
                log.debug("stopping the IO thread: %s", exc)

    @property
    def connected(self) -> bool:
        return self._manager is not None

    def _diagnose(self, exc: BaseException) -> str:
        servers = ",".join(self.cluster.bootstrap_servers)
        protocol = self.cluster.security.protocol
        auth = [e for e in self._manager._auth_failures.values()] if self._manager else []
        refused = None if auth else refusal(self.cluster.bootstrap_servers, self.cluster.security)
        if refused:
            return refused
        if auth:
            return (f"authentication to {servers} failed ({describe(auth[0])}); check "
                    f"security.sasl_mechanism, username and password")
        reachable, failures = probe(self.cluster.bootstrap_servers)
        if not reachable:
            return unreachable(failures)
        return (f"connected to {reachable[0]} but the Kafka handshake failed with security protocol {protocol} "
                f"({type(exc).__name__}); check security.protocol and the credentials")

    # ------------------------------------------------------------------ metadata of the client
    def broker_ids(self) -> list[int]:
        return sorted(b.node_id for b in self._manager.cluster.brokers())

    def knows_broker(self, broker: int) -> bool:
        return self._manager.cluster.broker_metadata(broker) is not None

    def request_metadata_update(self) -> None:
        self._manager.cluster.request_update()

    def refresh_metadata(self, timeout_s: float) -> bool:
        """Refresh the client's metadata (the brokers' addresses) and wait for it, at most ``timeout_s``;
        False when it did not complete in time."""
        future = self._manager.cluster.request_update()
        try:
            self._net.run(self._wait, future, int(timeout_s * 1000))
        except Exception as exc:
            log.debug("metadata refresh: %s", exc)
            return False
        return True

    async def _wait(self, future: Future, timeout_ms: int) -> Any:
        return await self._manager.wait_for(future, timeout_ms)

    def api_versions(self, api_key: int) -> tuple[int, int] | None:
        """(min, max) version of ``api_key`` the bootstrap broker supports, or None."""
        data = self._manager.broker_version_data
        versions = getattr(data, "api_versions", None) or {}
        found = versions.get(api_key)
        return (int(found[0]), int(found[1])) if found else None

    def connection_ready(self, broker: int) -> bool:
        conn = self._manager._conns.get(broker)
        return conn is not None and conn.connected and not conn.paused

    # ------------------------------------------------------------------ requests
    def send_all(self, calls: Sequence[Call], timeout_s: float | None = None) -> list[Outcome]:
        """Send every call at once and wait for all answers until the deadline (``request_timeout_ms`` by
        default); an unanswered call's outcome carries the error."""
        return self.gather(self.submit(calls, timeout_s))

    def submit(self, calls: Sequence[Call], timeout_s: float | None = None) -> Pending:
        """Send every call at once and return without waiting; :meth:`gather` waits for the answers, until the
        deadline set here (``request_timeout_ms`` by default). Other requests may be sent in between."""
        if not calls:
            return Pending([], [], time.monotonic())
        if self._manager is None:
            raise ReplmonError(f"cluster {self.cluster.name}: not connected")
        timeout_ms = int((timeout_s * 1000) if timeout_s is not None else self.request_timeout_ms)
        deadline = time.monotonic() + timeout_ms / 1000
        futures: list[Future] = self._net.run(self._submit, list(calls), timeout_ms)
        return Pending(list(calls), futures, deadline, timeout_ms / 1000)

    def gather(self, pending: Pending) -> list[Outcome]:
        """The outcome of each call of ``pending``, in its order, once answered or at its deadline."""
        if not pending.calls:
            return []
        result: list[Outcome] = self._net.run(self._gather, pending)
        return result

    async def _submit(self, calls: list[Call], timeout_ms: int) -> list[Future]:
        # The sampler paces the retries (one attempt per cycle): kafka-python's own reconnect backoff, grown
        # while a broker was down, would fail its requests at once for seconds after it is back.
        for broker in {call.broker for call in calls}:
            self._manager.reset_backoff(broker)
        futures = []
        for call in calls:
            self.on_request(call.label, call.broker)
            try:
                future = self._manager.send(call.request, node_id=call.broker, request_timeout_ms=timeout_ms)
            except Exception as exc:  # unknown broker id, a remembered authentication failure
                future = Future().failure(exc)
            futures.append(future)
        return futures

    async def _gather(self, pending: Pending) -> list[Outcome]:
        outcomes = []
        for call, future in zip(pending.calls, pending.futures, strict=True):
            left_ms = max(0.0, (pending.deadline - time.monotonic()) * 1000)
            try:
                response = await self._manager.wait_for(future, left_ms)
                outcomes.append(Outcome(call, response=response))
            except Exception as exc:
                # not done: the deadline passed with no answer. kafka-python's text then names what was left of the
                # deadline for this wait ("Timed out after 32.9 ms"), a figure that means nothing to an operator and
                # changes every cycle
                error = exc if future.is_done else Errors.KafkaTimeoutError(
                    f"no answer within {pending.timeout_s:.1f} s")
                outcomes.append(Outcome(call, error=error))
        return outcomes


async def _close_manager(manager: Any) -> None:
    manager.close()
