"""The secure local cluster (``replmon cluster up --secure``): TLS everywhere, SCRAM users, ACLs enforced.

* Brokers listen on ``SASL_SSL`` (SCRAM-SHA-512 over TLS), for clients and between brokers (user ``admin``),
  and on a second listener, ``MTLS``: ``SSL`` with client certificates required, for clients that authenticate by
  certificate alone (mutual TLS). A certificate's subject ``CN=<user>`` is the principal ``User:<user>``, so
  the same grants apply whichever way a user logs in.
* The controller listener is ``SSL`` with client certificates required: a broker authenticates to the controller
  with the node certificate (principal ``User:CN=replmon-local-node``). SCRAM cannot serve there: SCRAM
  credentials live in the metadata log that the controller serves.
* ``StandardAuthorizer`` on every node; super users: ``admin`` and the node principal. Everyone else gets exactly
  the grants of :mod:`replmon.core.security`.
* SCRAM users (``admin`` and one per role) are created when the storage is formatted (``--add-scram``), from salted
  passwords computed here, so no password appears on a command line.

The cluster directory's ``security/`` folder holds what a client needs (mode 0600 where secret): ``ca.pem`` (the
CA to trust), ``node.pem`` (the nodes' PEM keystore), ``users.json`` (user -> password), one Java client
properties file per user (``<user>.properties``, usable with kafka-acls.sh ``--command-config``) and per user a
client certificate (``<user>.crt.pem``) and its private key (``<user>.key.pem``, encrypted with the user's
password).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
from pathlib import Path

from pydantic import BaseModel, SecretStr

from replmon.core.config import SecurityConfig
from replmon.core.errors import ReplmonError
from replmon.core.security import Role
from replmon.testbed.localcluster import tls

PROTOCOL = "SASL_SSL"
MTLS_LISTENER = "MTLS"
MTLS_PROTOCOL = "SSL"
PRINCIPAL_MAPPING = "RULE:^CN=([^,]+)$/$1/,DEFAULT"
"""A client certificate's subject ``CN=<user>`` (and nothing else) is the principal ``User:<user>``."""
MECHANISM = "SCRAM-SHA-512"
ADMIN_USER = "admin"
USERS = (ADMIN_USER, *(str(r) for r in Role))
SCRAM_ITERATIONS = 8192
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


class LocalSecurity(BaseModel):
    """What ``cluster.json`` records of a secure cluster (no secrets: those stay in ``security/``)."""

    protocol: str = PROTOCOL
    sasl_mechanism: str = MECHANISM
    controller_protocol: str = "SSL"
    ca_file: Path
    keystore_file: Path
    credentials_file: Path
    users: dict[str, Path]
    """User -> its Java client properties file."""
    admin_user: str = ADMIN_USER
    certificates: dict[str, Path] = {}
    """User -> its client certificate chain (PEM), for the ``MTLS`` listener."""
    keys: dict[str, Path] = {}
    """User -> the certificate's private key (PEM, encrypted with the user's password)."""


def write_secret(path: Path, data: bytes | str) -> None:
    """Create ``path`` readable by its owner only, before anything is written into it."""
    raw = data.encode() if isinstance(data, str) else data
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(raw)


def create(cluster_dir: Path) -> LocalSecurity:
    """Certificates, passwords and client files in ``cluster_dir/security``."""
    sdir = cluster_dir / "security"
    sdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    ca = tls.new_authority()
    (sdir / "ca.pem").write_bytes(ca.cert_pem)
    write_secret(sdir / "node.pem", tls.node_keystore(ca))
    passwords = {user: secrets.token_urlsafe(24) for user in USERS}
    write_secret(sdir / "users.json", json.dumps(passwords, indent=2) + "\n")
    spec = LocalSecurity(ca_file=sdir / "ca.pem", keystore_file=sdir / "node.pem",
                         credentials_file=sdir / "users.json",
                         users={user: sdir / f"{user}.properties" for user in USERS},
                         certificates={user: sdir / f"{user}.crt.pem" for user in USERS},
                         keys={user: sdir / f"{user}.key.pem" for user in USERS})
    for user in USERS:
        chain, key = tls.client_certificate(ca, user, passwords[user])
        spec.certificates[user].write_bytes(chain)
        write_secret(spec.keys[user], key)
    for user, path in spec.users.items():
        write_secret(path, "".join(f"{k}={v}\n" for k, v in client_security(spec, user).java_client().items()))
    return spec


def password(spec: LocalSecurity, user: str) -> str:
    try:
        passwords = json.loads(spec.credentials_file.read_text())
    except (OSError, ValueError) as exc:
        raise ReplmonError(f"cannot read the local cluster's credentials {spec.credentials_file}: {exc}") from None
    if user not in passwords:
        raise ReplmonError(f"the local cluster has no user {user!r} (users: {', '.join(sorted(passwords))})")
    return str(passwords[user])


def client_security(spec: LocalSecurity, user: str = ADMIN_USER, mtls: bool = False) -> SecurityConfig:
    """replmon's security settings for ``user`` on this cluster: SCRAM, or with ``mtls`` its client certificate
    (for the ``MTLS`` listener)."""
    if mtls:
        if user not in spec.certificates:
            raise ReplmonError(f"the local cluster has no client certificate for {user!r}: it was created before "
                               "client certificates; create it again (replmon cluster down --purge; up --secure)")
        return SecurityConfig(protocol=MTLS_PROTOCOL, ssl_cafile=spec.ca_file, ssl_certfile=spec.certificates[user],
                              ssl_keyfile=spec.keys[user], ssl_key_password=SecretStr(password(spec, user)))
    return SecurityConfig(protocol=PROTOCOL, sasl_mechanism=MECHANISM, username=user,
                          password=SecretStr(password(spec, user)), ssl_cafile=spec.ca_file)


def salted_password(secret: str, salt: bytes, iterations: int = SCRAM_ITERATIONS) -> bytes:
    """SCRAM's SaltedPassword = Hi(password, salt, i) (RFC 5802): PBKDF2 with HMAC-SHA-512 for SCRAM-SHA-512."""
    return hashlib.pbkdf2_hmac("sha512", secret.encode(), salt, iterations)


def scram_format_args(spec: LocalSecurity) -> list[str]:
    """``--add-scram`` arguments for kafka-storage format: salt and salted password, never the password."""
    args = []
    for user in spec.users:
        salt = secrets.token_bytes(24)
        salted = salted_password(password(spec, user), salt)
        args += ["--add-scram", f"{MECHANISM}=[name={user},iterations={SCRAM_ITERATIONS},"
                 f"salt=\"{base64.b64encode(salt).decode()}\","
                 f"saltedpassword=\"{base64.b64encode(salted).decode()}\"]"]
    return args


def _tls_props(spec: LocalSecurity) -> dict[str, str]:
    return {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(spec.keystore_file),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(spec.ca_file)}


def _authorizer_props(spec: LocalSecurity) -> dict[str, str]:
    return {"authorizer.class.name": AUTHORIZER, "super.users": f"User:{spec.admin_user};{tls.NODE_PRINCIPAL}",
            "allow.everyone.if.no.acl.found": "false"}


def controller_props(spec: LocalSecurity) -> dict[str, str]:
    """Overrides of the controller's properties."""
    return {"listener.security.protocol.map": "CONTROLLER:SSL", "ssl.client.auth": "required",
            **_tls_props(spec), **_authorizer_props(spec)}


def broker_props(spec: LocalSecurity, port: int, mtls_port: int | None = None) -> dict[str, str]:
    """Overrides of a broker's properties; with ``mtls_port``, the ``MTLS`` listener there."""
    user, secret = spec.admin_user, password(spec, spec.admin_user)
    listeners = f"{PROTOCOL}://127.0.0.1:{port}" + (f",{MTLS_LISTENER}://127.0.0.1:{mtls_port}" if mtls_port else "")
    mtls = {f"listener.name.{MTLS_LISTENER.lower()}.ssl.client.auth": "required",
            "ssl.principal.mapping.rules": PRINCIPAL_MAPPING} if mtls_port else {}
    return {
        "listeners": listeners,
        "advertised.listeners": listeners,
        "inter.broker.listener.name": PROTOCOL,
        "listener.security.protocol.map": f"{PROTOCOL}:{PROTOCOL},{MTLS_LISTENER}:{MTLS_PROTOCOL},CONTROLLER:SSL",
        **mtls,
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        f"listener.name.{PROTOCOL.lower()}.{MECHANISM.lower()}.sasl.jaas.config":
            f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" '
            f'password="{secret}";',
        **_tls_props(spec),
        **_authorizer_props(spec),
    }
