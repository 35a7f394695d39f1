"""Kafka principals: `User:alice`, as ACLs and quotas name them.

A connection starts as `User:ANONYMOUS` (Kafka's principal for PLAINTEXT and for SSL without
client authentication); mutual TLS or SASL authentication replaces it.
"""

from __future__ import annotations

from dataclasses import dataclass

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """`Type:name` (the name may hold colons, as a TLS subject can); ValueError otherwise."""
        principal_type, sep, name = text.partition(":")
        if not sep or not principal_type or not name:
            raise ValueError(f"expected a principal as Type:name, got {text!r}")
        return cls(principal_type, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
