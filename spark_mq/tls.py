"""TLS for listeners and clients: Python's ``ssl`` contexts from PEM files, with Kafka's names.

Settings are librdkafka's PEM names under Kafka's ``ssl.`` prefix (Kafka's own
``ssl.keystore.location`` and friends name Java key stores, which Python does not read):

- ``ssl.certificate.location``: this side's certificate chain (PEM); a broker's server
  certificate, or a client's certificate for ``ssl.client.auth``;
- ``ssl.key.location`` and ``ssl.key.password``: its private key (PEM, encrypted or not);
- ``ssl.ca.location``: the CA certificates (PEM) the peer's certificate must chain to;
  empty on a client: the system's default CAs;
- ``ssl.client.auth`` (broker): ``none``, ``requested`` or ``required``, as Kafka;
- ``ssl.enabled.protocols``: ``TLSv1.2,TLSv1.3`` by default; nothing older is accepted;
- ``ssl.cipher.suites``: OpenSSL cipher names for TLS 1.2 (TLS 1.3's suites are OpenSSL's);
- ``ssl.endpoint.identification.algorithm`` (client): ``https`` (default) checks that the
  broker's certificate names the host connected to; empty turns the check off, as Kafka.

Every file problem (missing, unreadable, not PEM, a key that does not match the
certificate, a wrong key password) is a :class:`~spark_mq.errors.ConfigError` naming the
key and the file, raised when the context is built (at broker start, at client creation),
never at the first connection. No cryptography is written here: ``ssl`` does it all.

:func:`principal_of` gives the principal of a TLS peer as Kafka's default
``DefaultKafkaPrincipalBuilder`` does: ``User:`` and the subject's distinguished name in
RFC 2253 form (``CN=client,OU=eng,O=org``), or ``User:ANONYMOUS`` without a certificate.
:func:`describe_tls_failure` says in words why a handshake failed (expired certificate,
unknown CA, host name mismatch, certificate required).
"""

from __future__ import annotations

import dataclasses
import os
import ssl
from collections.abc import Mapping
from typing import Any, Final

from spark_mq.errors import ConfigError
from spark_mq.principal import ANONYMOUS, KafkaPrincipal

#: Kafka's security protocols (``security.protocol``, listener.security.protocol.map), and
#: those whose transport is TLS. SASL itself is not here: these say only what carries it.
SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS: Final = frozenset({"SSL", "SASL_SSL"})
#: The TLS versions ``ssl.enabled.protocols`` may name; anything older is refused.
TLS_VERSIONS: Final[Mapping[str, ssl.TLSVersion]] = {
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
#: Versions Kafka once accepted that are refused here with a ConfigError saying so.
REFUSED_VERSIONS: Final = ("SSLv2", "SSLv3", "TLSv1", "TLSv1.1", "TLS")
DEFAULT_PROTOCOLS: Final = ("TLSv1.2", "TLSv1.3")
CLIENT_AUTH_CHOICES: Final = ("none", "requested", "required")
#: The one endpoint identification algorithm Kafka knows; empty turns the check off.
HTTPS: Final = "https"

#: RFC 2253's short names for the attribute types OpenSSL reports by their long names.
_RFC2253_NAMES: Final[Mapping[str, str]] = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def parse_protocols(key: str, value: object) -> tuple[str, ...]:
    """``ssl.enabled.protocols``: a comma-separated list of TLSv1.2 and TLSv1.3."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ConfigError(f"{key} must be a list such as TLSv1.2,TLSv1.3", key=key, value=value)
    out = tuple(str(item).strip() for item in items if str(item).strip())
    for item in out:
        if item in REFUSED_VERSIONS:
            raise ConfigError(
                f"{key}: {item} is not accepted (it has known weaknesses); TLS 1.2 is the "
                "oldest version spark_mq speaks: use TLSv1.2,TLSv1.3",
                key=key,
                value=value,
            )
        if item not in TLS_VERSIONS:
            raise ConfigError(
                f"{key}: {item!r} is not a TLS version; choose from {', '.join(TLS_VERSIONS)}",
                key=key,
                value=value,
            )
    if not out:
        raise ConfigError(f"{key} must name at least one of TLSv1.2, TLSv1.3", key=key)
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class TlsSettings:
    """One side's TLS settings (a listener's, or a client's), already parsed."""

    certificate_location: str = ""
    key_location: str = ""
    key_password: str = ""
    ca_location: str = ""
    client_auth: str = "none"
    enabled_protocols: tuple[str, ...] = DEFAULT_PROTOCOLS
    cipher_suites: tuple[str, ...] = ()
    endpoint_identification_algorithm: str = HTTPS
    #: Which settings these are, for errors: "" (a client) or "listener.name.ssl." (a
    #: listener's overrides).
    key_prefix: str = ""

    def key(self, name: str) -> str:
        """The user-facing key of setting ``name`` (``ssl.key.location``)."""
        return f"{self.key_prefix}ssl.{name}"


def _readable(settings: TlsSettings, name: str, path: str) -> None:
    key = settings.key(name)
    if not os.path.exists(path):
        raise ConfigError(f"{key}: file {path} does not exist", key=key, value=path)
    if not os.path.isfile(path):
        raise ConfigError(f"{key}: {path} is not a file", key=key, value=path)
    if not os.access(path, os.R_OK):
        raise ConfigError(
            f"{key}: file {path} is not readable by this process (check its permissions)",
            key=key,
            value=path,
        )


def _base_context(settings: TlsSettings, purpose: ssl.Purpose) -> ssl.SSLContext:
    context = ssl.create_default_context(purpose)
    versions = [TLS_VERSIONS[v] for v in settings.enabled_protocols]
    context.minimum_version = min(versions)
    context.maximum_version = max(versions)
    if settings.cipher_suites:
        try:
            context.set_ciphers(":".join(settings.cipher_suites))
        except ssl.SSLError as exc:
            key = settings.key("cipher.suites")
            raise ConfigError(
                f"{key}: OpenSSL accepts none of {', '.join(settings.cipher_suites)} ({exc})",
                key=key,
                value=",".join(settings.cipher_suites),
            ) from exc
    if settings.ca_location:
        _readable(settings, "ca.location", settings.ca_location)
        try:
            context.load_verify_locations(cafile=settings.ca_location)
        except (ssl.SSLError, ValueError) as exc:
            key = settings.key("ca.location")
            raise ConfigError(
                f"{key}: {settings.ca_location} holds no PEM CA certificate ({exc})",
                key=key,
                value=settings.ca_location,
            ) from exc
    return context


def _load_chain(context: ssl.SSLContext, settings: TlsSettings) -> None:
    cert, key_file = settings.certificate_location, settings.key_location
    _readable(settings, "certificate.location", cert)
    if key_file:
        _readable(settings, "key.location", key_file)
    try:
        context.load_cert_chain(
            cert, key_file or None, password=settings.key_password.encode() or None
        )
    except ssl.SSLError as exc:
        reason = (exc.reason or str(exc)).upper()
        if _encrypted(key_file or cert) and "KEY_VALUES_MISMATCH" not in reason:
            # OpenSSL 3 says only "PEM lib" when the password is wrong or missing.
            given = "is wrong" if settings.key_password else "is not set"
            what = f"cannot decrypt the key in {key_file or cert}: ssl.key.password {given}"
            key = settings.key("key.password")
        elif "KEY_VALUES_MISMATCH" in reason:
            what = f"the key in {key_file or cert} does not belong to the certificate in {cert}"
            key = settings.key("key.location")
        elif "BAD_DECRYPT" in reason or "PASSWORD" in reason:
            what = f"cannot decrypt the key in {key_file or cert}: ssl.key.password is wrong"
            key = settings.key("key.password")
        elif "PEM" in reason or "NO_START_LINE" in reason:
            what = f"{cert} or {key_file or cert} is not a PEM certificate / private key"
            key = settings.key("certificate.location")
        else:
            what = f"cannot load {cert} with key {key_file or cert}"
            key = settings.key("certificate.location")
        raise ConfigError(f"{key}: {what} ({exc})", key=key, value=cert) from exc


def _encrypted(path: str) -> bool:
    """Whether the PEM file at ``path`` holds an encrypted private key."""
    try:
        with open(path, "rb") as file:
            head = file.read(64 * 1024)
    except OSError:
        return False
    return b"ENCRYPTED PRIVATE KEY" in head or b"Proc-Type: 4,ENCRYPTED" in head


def server_context(settings: TlsSettings, listener_name: str) -> ssl.SSLContext:
    """The context of a TLS listener: its certificate and key are required; with
    ``ssl.client.auth`` requested or required, clients' certificates are checked against
    ``ssl.ca.location``."""
    if not settings.certificate_location:
        key = settings.key("certificate.location")
        raise ConfigError(
            f"listener {listener_name} uses TLS but {key} is not set: give the broker's "
            "certificate (PEM) and ssl.key.location its private key",
            key=key,
        )
    context = _base_context(settings, ssl.Purpose.CLIENT_AUTH)
    _load_chain(context, settings)
    if settings.client_auth != "none":
        if not settings.ca_location:
            key = settings.key("ca.location")
            raise ConfigError(
                f"listener {listener_name}: ssl.client.auth={settings.client_auth} needs {key}, "
                "the CA that signs the clients' certificates",
                key=key,
            )
        context.verify_mode = (
            ssl.CERT_REQUIRED if settings.client_auth == "required" else ssl.CERT_OPTIONAL
        )
    else:
        context.verify_mode = ssl.CERT_NONE
    return context


def client_context(settings: TlsSettings) -> ssl.SSLContext:
    """The context of a client (or a broker connecting to another): the broker's certificate
    must chain to ``ssl.ca.location`` (or the system's CAs), and name the host connected to
    unless ``ssl.endpoint.identification.algorithm`` is empty; a certificate of its own is
    offered when ``ssl.certificate.location`` is set."""
    context = _base_context(settings, ssl.Purpose.SERVER_AUTH)
    context.check_hostname = settings.endpoint_identification_algorithm == HTTPS
    context.verify_mode = ssl.CERT_REQUIRED
    if settings.certificate_location:
        _load_chain(context, settings)
    elif settings.key_location:
        key = settings.key("certificate.location")
        raise ConfigError(
            f"{settings.key('key.location')} is set but {key} is not: give the certificate "
            "that goes with the key",
            key=key,
        )
    return context


def check_endpoint_identification(key: str, value: Any) -> None:
    if value not in ("", HTTPS):
        raise ConfigError(
            f"{key} must be https (check the broker's host name) or empty (do not); got {value!r}",
            key=key,
            value=value,
        )


def _escape_rfc2253(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (ch == "#" and i == 0) or (ch == " " and i in (0, len(value) - 1)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def distinguished_name(subject: Any) -> str:
    """``getpeercert()['subject']`` (relative names from the root down) in RFC 2253 form:
    the last relative name first, short attribute names, special characters escaped."""
    rdns = []
    for rdn in reversed(subject):
        rdns.append(
            "+".join(f"{_RFC2253_NAMES.get(k, k)}={_escape_rfc2253(str(v))}" for k, v in rdn)
        )
    return ",".join(rdns)


def principal_of(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> KafkaPrincipal:
    """The principal of a TLS peer: ``User:<subject DN>`` if it showed a certificate the
    listener verified, else ANONYMOUS."""
    if ssl_object is None:
        return ANONYMOUS
    cert = ssl_object.getpeercert()
    if not cert or not cert.get("subject"):
        return ANONYMOUS
    return KafkaPrincipal.user(distinguished_name(cert["subject"]))


def describe_tls_failure(exc: BaseException) -> str:
    """Why a TLS handshake failed, in words a user acts on."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        code = exc.verify_code
        message = exc.verify_message or str(exc)
        if code == 10:  # X509_V_ERR_CERT_HAS_EXPIRED
            return f"its certificate has expired ({message})"
        if code == 9:  # X509_V_ERR_CERT_NOT_YET_VALID
            return f"its certificate is not valid yet ({message})"
        if code in (18, 19, 20, 21):  # self-signed, or no issuer among the trusted CAs
            return (
                f"its certificate is signed by a CA this side does not trust ({message}): "
                "check ssl.ca.location"
            )
        if code in (62, 64):  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH
            return (
                f"its certificate does not name the host connected to ({message}); connect "
                "by a name the certificate lists, or set ssl.endpoint.identification."
                "algorithm to empty to skip the check"
            )
        return f"its certificate failed verification ({message})"
    if isinstance(exc, ssl.SSLError):
        reason = (exc.reason or "").upper()
        if "CERTIFICATE_REQUIRED" in reason or "PEER_DID_NOT_RETURN_A_CERTIFICATE" in reason:
            return "the broker requires a client certificate (ssl.certificate.location)"
        if "UNKNOWN_CA" in reason:
            return "the peer does not trust the CA of this side's certificate"
        if "BAD_CERTIFICATE" in reason or "CERTIFICATE_EXPIRED" in reason:
            return f"the peer refused this side's certificate ({exc.reason})"
        if "WRONG_VERSION_NUMBER" in reason or "HTTP_REQUEST" in reason:
            return "the peer does not speak TLS (a PLAINTEXT listener or client?)"
        if "VERSION" in reason or "PROTOCOL" in reason:
            return f"no TLS version both sides enable ({exc.reason})"
        return f"TLS failed: {exc.reason or exc}"
    return f"TLS failed: {exc}"


def is_authentication_failure(exc: BaseException) -> bool:
    """Whether a TLS error is a refusal (a certificate problem, an alert from the peer):
    retrying cannot help, unlike an EOF or a reset."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return True
    if isinstance(exc, ssl.SSLError) and not isinstance(
        exc, ssl.SSLEOFError | ssl.SSLWantReadError | ssl.SSLWantWriteError | ssl.SSLZeroReturnError
    ):
        reason = (exc.reason or "").upper()
        return "ALERT" in reason or "CERTIFICATE" in reason or "VERSION" in reason
    return False
