"""Test certificates: a CA and certificates it signs, made with the ``cryptography`` library
and written as PEM files (the TLS tests' only fixtures; nothing is checked in).

    ca = TestCa.create(tmp_path / "ca")
    server = ca.issue(tmp_path, "broker", hosts=["127.0.0.1", "localhost"])
    client = ca.issue(tmp_path, "client", subject_extra=[("O", "spark_mq")])
    old = ca.issue(tmp_path, "old", not_after=now - 1 day)   # an expired certificate
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

_OIDS = {
    "CN": NameOID.COMMON_NAME,
    "O": NameOID.ORGANIZATION_NAME,
    "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
    "C": NameOID.COUNTRY_NAME,
}


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path, password: str = "") -> None:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode())
        if password
        else serialization.NoEncryption()
    )
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    )


@dataclasses.dataclass(frozen=True)
class Issued:
    """A certificate and its key, as PEM files."""

    cert: Path
    key: Path


@dataclasses.dataclass(frozen=True)
class TestCa:
    """A self-signed CA whose certificate is ``cert`` (the ``ssl.ca.location`` file)."""

    __test__ = False  # a helper, not a test class

    cert: Path
    _key: ec.EllipticCurvePrivateKey
    _name: x509.Name

    @classmethod
    def create(cls, directory: Path, name: str = "spark_mq test CA") -> TestCa:
        directory.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = _now()
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .sign(key, hashes.SHA256())
        )
        path = directory / "ca.pem"
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return cls(path, key, subject)

    def issue(
        self,
        directory: Path,
        common_name: str,
        *,
        hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
        subject_extra: tuple[tuple[str, str], ...] = (),
        not_before: datetime.datetime | None = None,
        not_after: datetime.datetime | None = None,
        key_password: str = "",
    ) -> Issued:
        """A certificate for ``common_name`` valid for ``hosts`` (IP addresses or DNS names),
        server and client use both."""
        directory.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(_OIDS[k], v) for k, v in subject_extra]
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        now = _now()
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attributes))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before or now - datetime.timedelta(days=1))
            .not_valid_after(not_after or now + datetime.timedelta(days=10))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [x509.ExtendedKeyUsageOID.SERVER_AUTH, x509.ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        cert_path = directory / f"{common_name}.pem"
        key_path = directory / f"{common_name}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, key_path, key_password)
        return Issued(cert_path, key_path)


@dataclasses.dataclass(frozen=True)
class BrokerPki:
    """A CA, a broker certificate it issued for the loopback names, and another CA that did
    not issue it (what a client that must not trust the broker is given)."""

    ca: Path
    other_ca: Path
    broker: Issued

    @classmethod
    def create(cls, root: Path) -> BrokerPki:
        ca = TestCa.create(root / "ca")
        other = TestCa.create(root / "other", name="some other CA")
        return cls(ca.cert, other.cert, ca.issue(root, "broker", hosts=("127.0.0.1", "localhost")))
