"""TLS for SSL and SASL_SSL listeners, and for inter-broker connections to them.

Kafka's `ssl.*` keys, PEM only (`ssl.keystore.type=PEM`, `ssl.truststore.type=PEM`): the broker's
key and certificate chain come from `ssl.keystore.location` (one PEM file holding both) or
inline from `ssl.keystore.key` / `ssl.keystore.certificate.chain`; `ssl.truststore.location` is
a PEM bundle of the CAs that sign client (and peer broker) certificates. Every key may be
given per listener with Kafka's prefix, `listener.name.<name lowercased>.ssl.keystore.location`,
which wins over the plain key.

A client authenticated by its certificate (mutual TLS: `ssl.client.auth=required`, or
`requested` and the client sent one) is the principal `User:<subject DN>`, the DN in RFC 2253
form as Java prints it (most specific attribute first: `CN=alice,OU=eng,O=acme`), after
`ssl.principal.mapping.rules` (Kafka's DEFAULT keeps the DN; `RULE:pattern/replacement/[LU]`
rewrites it).
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

from ..config import BrokerConfig, ConfigError
from .principal import ANONYMOUS, USER_TYPE, KafkaPrincipal

HANDSHAKE_TIMEOUT_S = 10.0  # a client that never completes its handshake gives its slot back
SSL_KEYS = (
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.certificate.chain", "ssl.keystore.key",
    "ssl.key.password", "ssl.truststore.type", "ssl.truststore.location", "ssl.client.auth",
    "ssl.enabled.protocols", "ssl.cipher.suites", "ssl.principal.mapping.rules",
    "ssl.endpoint.identification.algorithm",
)
_PROTOCOL_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def listener_ssl_config(config: BrokerConfig, listener_name: str) -> dict[str, object]:
    """The `ssl.*` values for one listener: `listener.name.<name>.ssl.*` over the plain keys."""
    return {key: config.for_listener(listener_name, key) for key in SSL_KEYS}


def server_context(config: BrokerConfig, listener_name: str) -> ssl.SSLContext:
    """The TLS context of an SSL or SASL_SSL listener; ConfigError when its keys do not make one."""
    values = listener_ssl_config(config, listener_name)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _configure(context, values, listener_name)
    context.verify_mode = _CLIENT_AUTH[str(values["ssl.client.auth"])]
    if context.verify_mode != ssl.CERT_NONE and not values["ssl.truststore.location"]:
        raise ConfigError(f"listener {listener_name}: ssl.client.auth={values['ssl.client.auth']} needs "
                          "ssl.truststore.location (the CAs that sign client certificates)")
    if not (values["ssl.keystore.location"] or values["ssl.keystore.certificate.chain"]):
        raise ConfigError(f"listener {listener_name}: an SSL listener needs ssl.keystore.location, or "
                          "ssl.keystore.certificate.chain and ssl.keystore.key")
    return context


def client_context(config: BrokerConfig, listener_name: str) -> ssl.SSLContext:
    """What a broker connects to another broker's SSL listener with: the same truststore (the
    system's CAs without one) and keystore, the latter for listeners that want a client cert."""
    values = listener_ssl_config(config, listener_name)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _configure(context, values, listener_name)
    if not values["ssl.truststore.location"]:
        context.load_default_certs()
    context.check_hostname = str(values["ssl.endpoint.identification.algorithm"] or "").lower() == "https"
    return context


def _configure(context: ssl.SSLContext, values: dict[str, object], listener_name: str) -> None:
    """Protocols, ciphers, key pair and truststore, shared by both sides."""
    stores = {"ssl.keystore.type": values["ssl.keystore.location"] or values["ssl.keystore.certificate.chain"],
              "ssl.truststore.type": values["ssl.truststore.location"]}
    for key, given in stores.items():
        if given and str(values[key]).upper() != "PEM":
            raise ConfigError(f"listener {listener_name}: {key}={values[key]} is not supported; use PEM")
    versions = [_PROTOCOL_VERSIONS[v] for v in values["ssl.enabled.protocols"]]  # type: ignore[union-attr]
    context.minimum_version, context.maximum_version = min(versions), max(versions)
    ciphers = values["ssl.cipher.suites"]
    try:
        if ciphers:
            context.set_ciphers(":".join(ciphers))  # type: ignore[arg-type]
        _load_key_pair(context, values)
        if values["ssl.truststore.location"]:
            context.load_verify_locations(cafile=str(values["ssl.truststore.location"]))
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"listener {listener_name}: cannot set up TLS: {exc}") from None


def _load_key_pair(context: ssl.SSLContext, values: dict[str, object]) -> None:
    password = values["ssl.key.password"] or None
    if values["ssl.keystore.location"]:
        path = str(values["ssl.keystore.location"])
        context.load_cert_chain(path, path, password)  # type: ignore[arg-type]
        return
    chain, key = values["ssl.keystore.certificate.chain"], values["ssl.keystore.key"]
    if not chain:
        return
    if not key:
        raise ConfigError("ssl.keystore.certificate.chain needs ssl.keystore.key")
    # ssl loads key pairs from files only: write the inline PEM to a private temporary file
    with tempfile.NamedTemporaryFile("w", suffix=".pem", delete=False) as handle:
        os.fchmod(handle.fileno(), 0o600)
        handle.write(f"{key}\n{chain}\n")
    try:
        context.load_cert_chain(handle.name, handle.name, password)  # type: ignore[arg-type]
    finally:
        os.unlink(handle.name)


# ------------------------------------------------------------------------------ principals

# RFC 2253 keywords, as Java's X500Principal prints them; others appear as dotted OIDs.
_KEYWORDS = {
    "commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
    "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
    "domainComponent": "DC", "userId": "UID",
}
_OIDS = {"emailAddress": ("1.2.840.113549.1.9.1", 0x16), "serialNumber": ("2.5.4.5", 0x13),
         "title": ("2.5.4.12", 0x0C), "givenName": ("2.5.4.42", 0x0C), "surname": ("2.5.4.4", 0x0C)}


def rfc2253(subject: tuple[tuple[tuple[str, str], ...], ...]) -> str:
    """A subject as `ssl.SSLSocket.getpeercert()` gives it, in RFC 2253 form: the RDNs in reverse
    order, special characters escaped; attributes without a keyword as OID=#hex of their DER."""
    return ",".join("+".join(_attribute(name, value) for name, value in rdn) for rdn in reversed(subject))


def _attribute(name: str, value: str) -> str:
    if name in _KEYWORDS:
        return f"{_KEYWORDS[name]}={_escape(value)}"
    oid, tag = _OIDS.get(name, (name, 0x0C))
    encoded = value.encode()
    length = bytes([len(encoded)]) if len(encoded) < 128 else bytes([0x81, len(encoded)])
    return f"{oid}=#{bytes([tag]).hex()}{length.hex()}{encoded.hex()}"


def _escape(value: str) -> str:
    escaped = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if escaped.startswith(("#", " ")):
        escaped = "\\" + escaped
    if escaped.endswith(" ") and not escaped.endswith("\\ "):
        escaped = escaped[:-1] + "\\ "
    return escaped


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str
    case: str  # "", "L" or "U"

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        mapped = self.pattern.sub(self.replacement, dn)
        return mapped.lower() if self.case == "L" else mapped.upper() if self.case == "U" else mapped


# Kafka's SslPrincipalMapper.RULE_PARSER: DEFAULT, or RULE:pattern/replacement/[LU]
_RULE = re.compile(r"\s*(DEFAULT)|\s*RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)\s*(?:,|$)|\s*(.+?)\s*(?:,|$)")


def principal_mapper(rules_text: str) -> Callable[[str], KafkaPrincipal]:
    """`ssl.principal.mapping.rules` as a function from a DN to the principal; the first rule
    that matches decides. A DN no rule matches cannot authenticate (ValueError), as in Kafka."""
    rules = _parse_rules(rules_text)

    def principal(dn: str) -> KafkaPrincipal:
        for rule in rules:
            name = rule.apply(dn)
            if name is not None:
                return KafkaPrincipal(USER_TYPE, name)
        raise ValueError(f"no ssl.principal.mapping.rules rule matches {dn}")

    return principal


def _parse_rules(text: str) -> list[_Rule]:
    rules: list[_Rule] = []
    position = 0
    text = text.strip()
    while position < len(text):
        match = _RULE.match(text, position)
        if match is None or match.end() == position:
            break
        position = match.end()
        if match.group(1):
            rules.append(_Rule(None, "", ""))
        elif match.group(2) is not None:
            try:
                pattern = re.compile(match.group(2))
            except re.error as exc:
                raise ConfigError(f"Invalid rule in ssl.principal.mapping.rules: {match.group(0)}: {exc}") from None
            replacement = re.sub(r"\$(\d+)", r"\\g<\1>", match.group(3))
            rules.append(_Rule(pattern, replacement, match.group(4)))
        elif match.group(5):
            raise ConfigError(f"Invalid rule: {match.group(5)}")
    return rules


def peer_principal(ssl_object: ssl.SSLObject | None, mapper: Callable[[str], KafkaPrincipal]) -> KafkaPrincipal:
    """The principal of a TLS peer: its certificate's mapped DN, ANONYMOUS without a certificate."""
    certificate = ssl_object.getpeercert() if ssl_object is not None else None
    if not certificate:
        return ANONYMOUS
    return mapper(rfc2253(certificate["subject"]))


@dataclass(frozen=True, slots=True)
class ListenerTls:
    """What an SSL or SASL_SSL listener needs: its context, and who a client certificate names."""

    context: ssl.SSLContext
    principal: Callable[[str], KafkaPrincipal]

    @classmethod
    def build(cls, config: BrokerConfig, listener_name: str) -> ListenerTls:
        rules = listener_ssl_config(config, listener_name)["ssl.principal.mapping.rules"]
        return cls(server_context(config, listener_name), principal_mapper(str(rules)))
