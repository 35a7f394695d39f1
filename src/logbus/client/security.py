"""Secured listeners: the settings a librdkafka client would take (`ClientSecurity.from_settings`).

`security.protocol` SSL or SASL_SSL wraps each socket in TLS (`ssl.ca.location`, hostname checked
unless `ssl.endpoint.identification.algorithm=none`, `ssl.certificate.location` and
`ssl.key.location` for a client certificate); SASL_PLAINTEXT or SASL_SSL logs in first with
`sasl.mechanism` PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 as `sasl.username` / `sasl.password`,
through the login steps of `security/sasl_client.py` (`Connection` drives them).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..security.sasl_client import SaslLogin
from .errors import KafkaError


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """How to reach a secured listener: TLS around the socket, a SASL login on it, or both."""

    tls: ssl.SSLContext | None = None
    sasl: SaslLogin | None = None

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> ClientSecurity:
        """From librdkafka-style settings (those of `--command-config`); KafkaError when unusable."""
        protocol = str(settings.get("security.protocol", "plaintext")).upper()
        if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise KafkaError(f"security.protocol={protocol} is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL")
        return cls(_tls_context(settings) if protocol.endswith("SSL") else None,
                   _sasl_login(settings) if protocol.startswith("SASL") else None)


def _tls_context(settings: Mapping[str, Any]) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cafile=settings.get("ssl.ca.location") or None)
        if str(settings.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
            context.check_hostname = False
        if settings.get("ssl.certificate.location"):
            context.load_cert_chain(settings["ssl.certificate.location"], settings.get("ssl.key.location"),
                                    settings.get("ssl.key.password"))
    except (OSError, ssl.SSLError) as exc:
        raise KafkaError(f"cannot set up TLS: {exc}") from None
    return context


def _sasl_login(settings: Mapping[str, Any]) -> SaslLogin:
    mechanism = str(settings.get("sasl.mechanism", "GSSAPI")).upper()
    if mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        raise KafkaError(f"sasl.mechanism={mechanism}: this client logs in with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
    if not settings.get("sasl.username"):
        raise KafkaError("SASL needs sasl.username and sasl.password")
    return SaslLogin(mechanism, str(settings["sasl.username"]), str(settings.get("sasl.password", "")))
