"""SCRAM credentials as Kafka keeps them (sans-I/O): never a password, only what verifies one.

A credential is (salt, iterations, stored key, server key) per RFC 5802: the salted password is
PBKDF2-HMAC(password, salt, iterations), the client key HMAC(salted, "Client Key"), the stored key
H(client key) and the server key HMAC(salted, "Server Key"). A broker that holds only these can
check a SCRAM proof (and a PLAIN password, by deriving again) but cannot log in as the user.

The text form is Kafka's (ScramCredentialUtils.credentialToString), as it sits in ZooKeeper's
`/config/users/<user>` and in the embedded store:
`salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=N`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from dataclasses import dataclass

from .changes import apply_entity_changes

DEFAULT_ITERATIONS = 4096  # Kafka's kafka-configs/kafka-storage default, and its minimum
MIN_ITERATIONS = 4096  # ScramMechanism.minIterations
MAX_ITERATIONS = 16384  # ScramMechanism.maxIterations (AlterUserScramCredentials refuses more)
SALT_BYTES = 32


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    name: str
    code: int  # AlterUserScramCredentials / DescribeUserScramCredentials numbering
    hash_name: str


MECHANISMS: dict[str, ScramMechanism] = {
    "SCRAM-SHA-256": ScramMechanism("SCRAM-SHA-256", 1, "sha256"),
    "SCRAM-SHA-512": ScramMechanism("SCRAM-SHA-512", 2, "sha512"),
}
MECHANISMS_BY_CODE: dict[int, ScramMechanism] = {m.code: m for m in MECHANISMS.values()}


class CredentialFormatError(ValueError):
    """Text that is not a SCRAM credential in Kafka's form."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_text(self) -> str:
        return (f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},"
                f"server_key={_b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        fields = dict(part.partition("=")[::2] for part in text.split(","))
        try:
            return cls(_unb64(fields["salt"]), _unb64(fields["stored_key"]), _unb64(fields["server_key"]),
                       int(fields["iterations"]))
        except (KeyError, ValueError, binascii.Error) as exc:
            raise CredentialFormatError(f"not a SCRAM credential: {text[:100]!r}") from exc


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def salted_password(mechanism: ScramMechanism, password: bytes, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's Hi(): PBKDF2 with the mechanism's HMAC."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password, salt, iterations)


def credential_from_salted_password(mechanism: ScramMechanism, salt: bytes, salted: bytes,
                                    iterations: int) -> ScramCredential:
    """What AlterUserScramCredentials stores from the salted password a client sends."""
    client_key = hmac.digest(salted, b"Client Key", mechanism.hash_name)
    stored_key = hashlib.new(mechanism.hash_name, client_key).digest()
    server_key = hmac.digest(salted, b"Server Key", mechanism.hash_name)
    return ScramCredential(salt, stored_key, server_key, iterations)


def new_credential(mechanism: ScramMechanism, password: str, iterations: int = DEFAULT_ITERATIONS,
                   salt: bytes | None = None) -> ScramCredential:
    """A credential for `password` with a fresh random salt."""
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    salted = salted_password(mechanism, password.encode("utf-8"), salt, iterations)
    return credential_from_salted_password(mechanism, salt, salted, iterations)


def password_matches(mechanism: ScramMechanism, credential: ScramCredential, password: bytes) -> bool:
    """Derive `password` with the credential's salt and iterations; compare in constant time."""
    salted = salted_password(mechanism, password, credential.salt, credential.iterations)
    derived = credential_from_salted_password(mechanism, credential.salt, salted, credential.iterations)
    return hmac.compare_digest(derived.stored_key, credential.stored_key)


def iterations_error(iterations: int) -> str | None:
    """Why Kafka refuses this iteration count (UNACCEPTABLE_CREDENTIAL), or None."""
    if iterations < MIN_ITERATIONS:
        return f"Too few iterations: {iterations} (at least {MIN_ITERATIONS})"
    if iterations > MAX_ITERATIONS:
        return f"Too many iterations: {iterations} (at most {MAX_ITERATIONS})"
    return None


UserCredentials = dict[str, dict[str, ScramCredential]]  # user -> mechanism name -> credential
CredentialChanges = dict[str, dict[str, ScramCredential | None]]  # None deletes


def apply_changes(current: UserCredentials, changes: CredentialChanges) -> UserCredentials:
    """The credentials after `changes`, as a new mapping; a user left without any credential disappears."""
    return apply_entity_changes(current, changes)


def encode_user_config(by_mechanism: dict[str, ScramCredential]) -> dict[str, str]:
    """A user's credentials as the config map Kafka writes (`{"SCRAM-SHA-256": "salt=..."}`)."""
    return {mechanism: credential.to_text() for mechanism, credential in sorted(by_mechanism.items())}


def decode_user_config(config: dict[str, str]) -> dict[str, ScramCredential]:
    """The SCRAM credentials in a user's config map (other keys, e.g. quotas, are not ours)."""
    return {mechanism: ScramCredential.from_text(text) for mechanism, text in config.items()
            if mechanism in MECHANISMS}
