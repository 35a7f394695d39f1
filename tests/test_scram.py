"""SCRAM credentials: Kafka's text form, the stores (embedded and ZooKeeper), and the
DescribeUserScramCredentials / AlterUserScramCredentials APIs with real admin clients."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import kafka.admin as kp
import pytest
import scramp
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from helpers import QUIET, RawConnection
from kio.schema.alter_user_scram_credentials.v0.request import ScramCredentialUpsertion
from kio.schema.describe_user_scram_credentials.v0.request import UserName
from kio.schema.errors import ErrorCode

from logbus.cli.main import main
from logbus.cluster.metadata import EmbeddedMetadataStore
from logbus.security.scram import (
    MECHANISMS,
    CredentialFormatError,
    ScramCredential,
    apply_changes,
    new_credential,
    password_matches,
)
from logbus.testing import BrokerProcess, running_broker

SHA256, SHA512 = MECHANISMS["SCRAM-SHA-256"], MECHANISMS["SCRAM-SHA-512"]
DESCRIBE, ALTER = 50, 51
FUTURE_TIMEOUT_S = 15


# ---------------------------------------------------------------- credentials (in process)

def test_credential_text_is_kafkas_form_and_round_trips() -> None:
    credential = new_credential(SHA256, "secret", iterations=4096, salt=b"salty")
    text = credential.to_text()
    assert text.startswith("salt=c2FsdHk=,stored_key=") and text.endswith(",iterations=4096")
    assert ScramCredential.from_text(text) == credential
    assert "secret" not in text


@pytest.mark.parametrize("text", ["", "salt=AA==", "salt=!!,stored_key=AA==,server_key=AA==,iterations=1",
                                  "salt=AA==,stored_key=AA==,server_key=AA==,iterations=x"])
def test_malformed_credential_text_is_refused(text: str) -> None:
    with pytest.raises(CredentialFormatError):
        ScramCredential.from_text(text)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_keys_match_an_independent_scram_implementation(mechanism: str) -> None:
    salt, stored_key, server_key, _ = scramp.ScramMechanism(mechanism).make_auth_info("pw", 4096, b"salt")
    ours = new_credential(MECHANISMS[mechanism], "pw", 4096, b"salt")
    assert (ours.stored_key, ours.server_key) == (stored_key, server_key)


def test_password_check_derives_with_the_stored_salt() -> None:
    credential = new_credential(SHA512, "right", iterations=4096)
    assert password_matches(SHA512, credential, b"right")
    assert not password_matches(SHA512, credential, b"wrong")


def test_changes_apply_on_a_copy_and_empty_users_disappear() -> None:
    one = new_credential(SHA256, "a")
    current = {"alice": {"SCRAM-SHA-256": one}}
    after = apply_changes(current, {"alice": {"SCRAM-SHA-256": None}, "bob": {"SCRAM-SHA-512": one}})
    assert after == {"bob": {"SCRAM-SHA-512": one}}
    assert current == {"alice": {"SCRAM-SHA-256": one}}


PASSWORD = "not in base64!"  # spaces and "!": the salts and keys (base64) cannot contain it by chance


def test_embedded_store_keeps_credentials_across_a_restart(tmp_path) -> None:
    async def scenario() -> tuple[dict, dict]:
        store = EmbeddedMetadataStore(str(tmp_path), 0)
        await store.start()
        await store.alter_scram_credentials({"alice": {"SCRAM-SHA-256": new_credential(SHA256, PASSWORD)}})
        again = EmbeddedMetadataStore(str(tmp_path), 0)
        await again.start()
        return store.scram_credentials(), again.scram_credentials()

    written, read_back = asyncio.run(scenario())
    assert written == read_back and list(read_back) == ["alice"]
    saved = json.loads((tmp_path / "logbus-metadata.json").read_text())
    assert saved["users"]["alice"]["SCRAM-SHA-256"].startswith("salt=")
    assert PASSWORD not in json.dumps(saved["users"])


def test_embedded_store_changes_nothing_when_the_write_fails(tmp_path) -> None:
    def full_disk(_path: str, _state: dict) -> None:
        raise OSError(28, "No space left on device")

    async def scenario() -> dict:
        store = EmbeddedMetadataStore(str(tmp_path), 0)
        await store.start()
        store._write = full_disk
        with pytest.raises(Exception, match="No space"):
            await store.alter_scram_credentials({"alice": {"SCRAM-SHA-256": new_credential(SHA256, PASSWORD)}})
        return store.scram_credentials()

    assert asyncio.run(scenario()) == {}


# ---------------------------------------------------------------- the APIs, real clients

@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with running_broker() as started:
        yield started


def _admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})


def _upsert(user: str, password: bytes, mechanism: ScramMechanism = ScramMechanism.SCRAM_SHA_256,
            iterations: int = 4096) -> UserScramCredentialUpsertion:
    return UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, iterations), password)


def _alter(broker: BrokerProcess, alterations: list) -> dict[str, KafkaException | None]:
    outcome = {}
    admin = _admin(broker)  # held: the futures fail if the client is collected before they complete
    for user, future in admin.alter_user_scram_credentials(alterations).items():
        try:
            future.result(FUTURE_TIMEOUT_S)
            outcome[user] = None
        except KafkaException as exc:
            outcome[user] = exc
    return outcome


def _code(exc: KafkaException | None) -> int | None:
    return None if exc is None else exc.args[0].code()


def test_confluent_admin_alters_and_describes_credentials(broker: BrokerProcess) -> None:
    outcome = _alter(broker, [_upsert("ann", b"pw1"), _upsert("ann", b"pw2", ScramMechanism.SCRAM_SHA_512, 8192),
                              _upsert("ben", b"pw3")])
    assert outcome == {"ann": None, "ben": None}
    admin = _admin(broker)
    described = admin.describe_user_scram_credentials(["ann", "ben"])
    ann = {(i.mechanism, i.iterations) for i in described["ann"].result(FUTURE_TIMEOUT_S).scram_credential_infos}
    assert ann == {(ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 8192)}
    everyone = admin.describe_user_scram_credentials().result(FUTURE_TIMEOUT_S)
    assert {"ann", "ben"} <= set(everyone)
    deletion = UserScramCredentialDeletion("ben", ScramMechanism.SCRAM_SHA_256)
    assert _alter(broker, [deletion]) == {"ben": None}
    with pytest.raises(KafkaException) as missing:
        admin.describe_user_scram_credentials(["ben"])["ben"].result(FUTURE_TIMEOUT_S)
    assert missing.value.args[0].code() == ErrorCode.resource_not_found


def test_refused_alterations_get_kafkas_errors_and_change_nothing(broker: BrokerProcess) -> None:
    outcome = _alter(broker, [
        _upsert("few", b"pw", iterations=4095), _upsert("many", b"pw", iterations=16385),
        _upsert("twice", b"a"), _upsert("twice", b"b"),
        UserScramCredentialDeletion("nobody", ScramMechanism.SCRAM_SHA_256),
        _upsert("mixed", b"fine"), _upsert("mixed", b"pw", ScramMechanism.SCRAM_SHA_512, 1),
    ])
    assert {user: _code(exc) for user, exc in outcome.items()} == {
        "few": ErrorCode.unacceptable_credential, "many": ErrorCode.unacceptable_credential,
        "twice": ErrorCode.duplicate_resource, "nobody": ErrorCode.resource_not_found,
        "mixed": ErrorCode.unacceptable_credential,
    }
    admin = _admin(broker)
    described = admin.describe_user_scram_credentials(["mixed"])
    with pytest.raises(KafkaException):
        described["mixed"].result(FUTURE_TIMEOUT_S)  # nothing of a refused user was applied


def test_unknown_mechanism_and_duplicate_describe_over_the_wire(broker: BrokerProcess) -> None:
    with RawConnection(broker.bootstrap) as connection:
        altered = connection.call(ALTER, 0, deletions=(), upsertions=(
            _raw_upsertion("zed", mechanism=3),))
        described = connection.call(DESCRIBE, 0, users=(_user("x"), _user("x")))
    assert altered.results[0].error_code == ErrorCode.unsupported_sasl_mechanism
    assert described.results[0].error_code == ErrorCode.duplicate_resource
    assert len(described.results) == 1


def test_kafka_python_admin_alters_and_describes(broker: BrokerProcess) -> None:
    admin = kp.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        errors = admin.alter_user_scram_credentials(
            [kp.UserScramCredentialUpsertion("kim", kp.ScramMechanism.SCRAM_SHA_512, "pw", iterations=5000)])
        assert errors == {"kim": None}
        described = admin.describe_user_scram_credentials(["kim"])
        assert described["kim"]["error"] is None
        assert [(i["mechanism"], i["iterations"]) for i in described["kim"]["credential_infos"]] == \
            [(kp.ScramMechanism.SCRAM_SHA_512, 5000)]
    finally:
        admin.close()


def test_credentials_survive_a_broker_restart(tmp_path) -> None:
    with running_broker(data_dir=str(tmp_path / "data")) as started:
        assert _alter(started, [_upsert("ria", b"pw")]) == {"ria": None}
        started.stop()
        started.start()
        admin = _admin(started)
        described = admin.describe_user_scram_credentials(["ria"])["ria"].result(FUTURE_TIMEOUT_S)
        assert [i.iterations for i in described.scram_credential_infos] == [4096]


def _user(name: str) -> UserName:
    return UserName(name=name)


def _raw_upsertion(name: str, mechanism: int) -> ScramCredentialUpsertion:
    return ScramCredentialUpsertion(name=name, mechanism=mechanism, iterations=4096, salt=b"s",
                                    salted_password=b"p" * 32)




# ---------------------------------------------------------------- logbus users (embedded store)

def test_logbus_users_set_list_delete(tmp_path, capsys: pytest.CaptureFixture) -> None:
    store = ["--data-dir", str(tmp_path / "data")]
    (tmp_path / "pw").write_text("secret\nignored second line\n")
    assert main(["users", "set", "zoe", "--password-file", str(tmp_path / "pw"), *store]) == 0
    assert main(["users", "set", "zoe", "--password-file", str(tmp_path / "pw"), "--mechanism", "SCRAM-SHA-512",
                 "--iterations", "8192", *store]) == 0
    capsys.readouterr()
    assert main(["users", "list", *store]) == 0
    assert capsys.readouterr().out == "zoe\tSCRAM-SHA-256 (4096 iterations), SCRAM-SHA-512 (8192 iterations)\n"
    saved = (tmp_path / "data" / "logbus-metadata.json").read_text()
    assert "secret" not in saved
    credential = ScramCredential.from_text(json.loads(saved)["users"]["zoe"]["SCRAM-SHA-256"])
    assert password_matches(SHA256, credential, b"secret")
    assert main(["users", "delete", "zoe", "--mechanism", "SCRAM-SHA-256", *store]) == 0
    assert main(["users", "delete", "zoe", "--mechanism", "SCRAM-SHA-256", *store]) == 1
    assert main(["users", "delete", "zoe", *store]) == 0
    capsys.readouterr()
    assert main(["users", "list", *store]) == 0 and capsys.readouterr().out == ""


@pytest.mark.parametrize("password, options, message", [
    ("pw\n", ["--iterations", "4095"], "Too few iterations"),
    ("pw\n", ["--iterations", "16385"], "Too many iterations"),
    ("\n", [], "is empty"),
])
def test_logbus_users_set_refusals(tmp_path, capsys: pytest.CaptureFixture, password: str, options: list[str],
                                   message: str) -> None:
    (tmp_path / "pw").write_text(password)
    assert main(["users", "set", "zoe", "--password-file", str(tmp_path / "pw"), *options,
                 "--data-dir", str(tmp_path / "data")]) == 1
    assert message in capsys.readouterr().err
