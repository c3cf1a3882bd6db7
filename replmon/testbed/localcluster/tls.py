"""Certificates of the secure local cluster, made with the ``cryptography`` package (pure: values in, PEM out).

A private certificate authority signs one node certificate (SAN 127.0.0.1 and localhost) that the controller and
every broker present. Kafka reads both as PEM: ``ssl.keystore.type=PEM`` (the node's private key followed by its
certificate chain in one file) and ``ssl.truststore.type=PEM`` (the CA certificate). The CA's private key is
never written: nothing can be signed by it once the cluster directory exists.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

NODE_SUBJECT = "replmon-local-node"
NODE_PRINCIPAL = f"User:CN={NODE_SUBJECT}"
"""The node certificate's subject is this common name alone, so that as a TLS client on the controller listener
a broker's principal is ``User:CN=replmon-local-node``."""
VALIDITY = dt.timedelta(days=825)


@dataclass(frozen=True)
class Authority:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)  # tolerate a little clock skew


def new_authority(common_name: str = "replmon local CA") -> Authority:
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(common_name)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(_now())
            .not_valid_after(_now() + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return Authority(cert, key)


def node_keystore(ca: Authority, common_name: str = NODE_SUBJECT,
                  hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> bytes:
    """A PEM keystore for Kafka: an unencrypted PKCS#8 private key, then the node certificate and the CA's.
    The certificate serves both as server certificate (clients check the SAN) and as client certificate (the
    brokers authenticate to the controller with it)."""
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    cert = (x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(ca.cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(_now()).not_valid_after(_now() + VALIDITY)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
            .sign(ca.key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return key_pem + cert.public_bytes(serialization.Encoding.PEM) + ca.cert_pem


def client_certificate(ca: Authority, common_name: str, key_password: str) -> tuple[bytes, bytes]:
    """A client certificate for mutual TLS, subject ``CN=<common_name>``: its PEM chain (the certificate, then the
    CA's) and its private key, PKCS#8 encrypted with ``key_password``, as an operator's key usually is."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(ca.cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(_now()).not_valid_after(_now() + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
            .sign(ca.key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.BestAvailableEncryption(key_password.encode()))
    return cert.public_bytes(serialization.Encoding.PEM) + ca.cert_pem, key_pem
