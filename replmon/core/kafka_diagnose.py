"""Why a Kafka cluster refuses a client, in one line: the certificate is not trusted, the TLS handshake fails, or
the SASL authentication fails. kafka-python reports all of these as "Unable to bootstrap" after its timeout; this
module asks again, one step at a time (TCP, TLS with Python's ssl module, then SASL), and names the step.

No message ever carries a secret: only user names, file names and Kafka's or OpenSSL's own reason.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
from collections.abc import Sequence
from typing import Any

from replmon.core.config import SecurityConfig
from replmon.core.errors import ReplmonError, describe

log = logging.getLogger(__name__)
PROBE_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 2.0


def probe(servers: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The bootstrap servers that accept a TCP connection, and why each other one does not, in an operator's
    words: a host name that does not resolve (a typo, DNS) is told apart from a port where nothing listens and
    from a host that does not answer (down, or a firewall dropping the connection)."""
    reachable, failures = [], {}
    for server in servers:
        host, _, port = server.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S):
                reachable.append(server)
        except socket.gaierror as err:
            failures[server] = f"host name {host!r} does not resolve: {err.strerror}"
        except ConnectionRefusedError:
            failures[server] = "connection refused: nothing listens there"
        except TimeoutError:
            failures[server] = (f"no answer within {CONNECT_TIMEOUT_S:g} s: the host is down or a firewall drops the "
                                "connection")
        except OSError as err:
            failures[server] = err.strerror or str(err)
        except ValueError:
            failures[server] = "not host:port"
    return reachable, failures


def unreachable(failures: dict[str, str]) -> str:
    """One line for a cluster none of whose bootstrap servers accepts a connection (``failures`` of :func:`probe`)."""
    return "cannot connect to any bootstrap server: " + "; ".join(f"{s} ({why})" for s, why in failures.items())


def none_reachable(servers: Sequence[str]) -> str | None:
    """:func:`unreachable` when no bootstrap server accepts a TCP connection, else None: asked before a Kafka
    client is made, it says at once (a name that does not resolve, a refused port) what the client would say only
    after its bootstrap timeout, and less precisely."""
    reachable, failures = probe(servers)
    return None if reachable else unreachable(failures)


def require_reachable(servers: Sequence[str], what: str) -> None:
    """Raise "cannot reach WHAT SERVERS: why" at once when no bootstrap server accepts a TCP connection
    (:func:`none_reachable`): a command that needs the cluster now says so before it makes a Kafka client."""
    why = none_reachable(servers)
    if why is not None:
        raise ReplmonError(f"cannot reach {what} {','.join(servers)}: {why}")


def connect_problem(servers: Sequence[str], otherwise: BaseException) -> str:
    """Why a Kafka client could not reach ``servers``: :func:`unreachable` when no bootstrap server accepts a TCP
    connection (a name that does not resolve, nothing listening), else the client's own error ``otherwise``."""
    reachable, failures = probe(servers)
    return describe(otherwise) if reachable else unreachable(failures)


def tls_context(security: SecurityConfig) -> ssl.SSLContext:
    """The trust settings kafka-python uses: the configured CA file (else the system's), hostname checked."""
    ctx = ssl.create_default_context(cafile=str(security.ssl_cafile) if security.ssl_cafile else None)
    ctx.check_hostname = security.ssl_check_hostname
    if security.ssl_certfile:
        password = security.ssl_key_password.get_secret_value() if security.ssl_key_password else None
        ctx.load_cert_chain(str(security.ssl_certfile), str(security.ssl_keyfile) if security.ssl_keyfile else None,
                            password)
    return ctx


def tls_problem(server: str, security: SecurityConfig, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """The reason a TLS handshake with ``server`` fails, or None (it succeeds, or TLS is not configured)."""
    if security.protocol not in ("SSL", "SASL_SSL"):
        return None
    host, _, port = server.rpartition(":")
    try:
        ctx = tls_context(security)
    except (OSError, ssl.SSLError) as exc:
        return f"cannot load the TLS settings (security.ssl_cafile / ssl_certfile): {exc}"
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as sock, \
                ctx.wrap_socket(sock, server_hostname=host):
            return None
    except ssl.SSLCertVerificationError as exc:
        trusted = f"security.ssl_cafile {security.ssl_cafile}" if security.ssl_cafile else "the system's CAs"
        return (f"TLS handshake with {server} failed: the broker's certificate is not trusted by {trusted} "
                f"({exc.verify_message})")
    except ssl.SSLError as exc:
        return f"TLS handshake with {server} failed ({exc.reason or exc}); check security.protocol"
    except OSError as exc:
        log.debug("TLS probe of %s: %s", server, exc)
        return None


def sasl_problem(server: str, security: SecurityConfig, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """The broker's reason for refusing our SASL authentication, or None."""
    if not security.protocol.startswith("SASL"):
        return None
    from kafka.net.manager import KafkaConnectionManager
    from kafka.net.selector import NetworkSelector

    config: dict[str, Any] = {"bootstrap_servers": [server], "client_id": "replmon-diagnose",
                              "request_timeout_ms": int(timeout_s * 1000), **security.kafka_python()}
    net = NetworkSelector(**config)
    net.start()
    manager = KafkaConnectionManager(net, **config)
    failures: list[BaseException] = []
    try:
        node_id = manager.cluster.bootstrap_brokers()[0].node_id
        for _attempt in range(3):
            failure = net.run(_connect, manager, node_id, int(timeout_s * 1000))
            if failure is None:
                return None
            failures.append(failure)
            if _is_auth_failure(failure):
                break
    finally:
        with contextlib.suppress(Exception):
            net.run(_close, manager)
        with contextlib.suppress(Exception):
            net.stop(timeout_ms=2000)
    who = f"user {security.username} with {security.sasl_mechanism}"
    refused = [f for f in failures if _is_auth_failure(f)]
    if refused:
        reason = str(refused[0]).split(": ")[-1].strip()
        return f"authentication of {who} failed ({reason}); check security.username and password"
    # The TLS handshake succeeded (tls_problem runs first) and the broker hangs up during SASL every time: that is
    # how it answers a wrong password when kafka-python does not get to read the error response.
    return (f"the broker closed every connection while authenticating {who}: wrong username or password, or a "
            f"SASL mechanism the listener does not offer; check security.username, password and sasl_mechanism")


def _is_auth_failure(exc: BaseException) -> bool:
    import kafka.errors as Errors

    return isinstance(exc, Errors.SaslAuthenticationFailedError)


async def _connect(manager: Any, node_id: Any, timeout_ms: int) -> BaseException | None:
    try:
        conn = manager.get_connection(node_id, timeout_ms=timeout_ms, pop_on_close=False,
                                      refresh_metadata_on_err=False, reset_backoff_on_connect=False)
        await conn
    except Exception as exc:
        with contextlib.suppress(Exception):
            manager._conns.pop(node_id).close(exc)
        manager.reset_backoff(node_id)
        return exc
    return None


async def _close(manager: Any) -> None:
    manager.close()


def refusal(servers: Sequence[str], security: SecurityConfig) -> str | None:
    """Why the cluster at ``servers`` refuses this client (TLS, then SASL), or None when nothing answers or
    nothing can be blamed on the client's settings."""
    up, _ = probe(servers)
    if not up:
        return None
    return tls_problem(up[0], security) or sasl_problem(up[0], security)
