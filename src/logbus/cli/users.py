"""`logbus users`: SCRAM users written straight into the metadata store, before any broker runs,
as `kafka-storage format --add-scram` (embedded store) or `kafka-configs --zookeeper` (a cluster)
do; a running cluster's users are better managed through AlterUserScramCredentials (any admin
client), which every broker sees at once.

    logbus users set NAME --password-file F [--mechanism SCRAM-SHA-256|SCRAM-SHA-512] [--iterations N]
                     (--data-dir DIR | --zookeeper HOST:PORT[/chroot])
    logbus users list (--data-dir DIR | --zookeeper ...)
    logbus users delete NAME [--mechanism M] (--data-dir DIR | --zookeeper ...)

The password is read from a file (its first line), never from the command line, where other users
of the machine could see it in the process list. Only the salted keys are stored. With --data-dir
the broker must be stopped: a running broker would not see the change and would overwrite it.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..cluster.metadata import EmbeddedMetadataStore, MetadataWriteError
from ..security.scram import (
    DEFAULT_ITERATIONS,
    MECHANISMS,
    CredentialChanges,
    UserCredentials,
    iterations_error,
    new_credential,
)
from .common import CliError

Writer = Callable[[CredentialChanges], None]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("users", help="manage SASL/SCRAM users in the metadata store")
    commands = parser.add_subparsers(dest="users_command", required=True)

    set_user = commands.add_parser("set", help="add a user or change its password")
    set_user.add_argument("name")
    set_user.add_argument("--password-file", required=True, help="file whose first line is the password")
    set_user.add_argument("--mechanism", choices=sorted(MECHANISMS), default="SCRAM-SHA-256")
    set_user.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                          help=f"PBKDF2 iterations (default {DEFAULT_ITERATIONS}, Kafka's)")
    _add_store_options(set_user)
    set_user.set_defaults(run=_set)

    list_users = commands.add_parser("list", help="users and their mechanisms (never a key)")
    _add_store_options(list_users)
    list_users.set_defaults(run=_list)

    delete = commands.add_parser("delete", help="remove a user's credentials")
    delete.add_argument("name")
    delete.add_argument("--mechanism", choices=sorted(MECHANISMS), help="only this mechanism (default: all)")
    _add_store_options(delete)
    delete.set_defaults(run=_delete)


def _add_store_options(parser: argparse.ArgumentParser) -> None:
    store = parser.add_mutually_exclusive_group(required=True)
    store.add_argument("--data-dir", help="a single broker's data dir (its embedded metadata store)")
    store.add_argument("--zookeeper", metavar="HOST:PORT[/chroot]", help="a cluster's zookeeper.connect")


def _set(args: argparse.Namespace) -> int:
    password = _read_password(args.password_file)
    reason = iterations_error(args.iterations)
    if reason is not None:
        raise CliError(reason)
    credential = new_credential(MECHANISMS[args.mechanism], password, args.iterations)
    with _store(args) as (_current, write):
        write({args.name: {args.mechanism: credential}})
    print(f"{args.name}: {args.mechanism} set ({args.iterations} iterations)")
    return 0


def _delete(args: argparse.Namespace) -> int:
    with _store(args) as (current, write):
        mechanisms = [args.mechanism] if args.mechanism else sorted(current.get(args.name, {}))
        if not mechanisms or mechanisms[0] not in current.get(args.name, {}):
            raise CliError(f"user {args.name} has no {args.mechanism or 'SCRAM'} credential")
        write({args.name: dict.fromkeys(mechanisms)})
    print(f"{args.name}: {', '.join(mechanisms)} deleted")
    return 0


def _list(args: argparse.Namespace) -> int:
    with _store(args) as (current, _write):
        users = {user: current[user] for user in sorted(current)}
    for user, by_mechanism in users.items():
        details = ", ".join(f"{name} ({credential.iterations} iterations)"
                            for name, credential in sorted(by_mechanism.items()))
        print(f"{user}\t{details}")
    return 0


def _read_password(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            password = handle.readline().rstrip("\r\n")
    except OSError as exc:
        raise CliError(f"cannot read the password file: {exc}") from None
    if not password:
        raise CliError(f"{path}: the first line (the password) is empty")
    return password


@contextmanager
def _store(args: argparse.Namespace) -> Iterator[tuple[UserCredentials, Writer]]:
    """(the users now, a function writing changes) of the store the options name."""
    if args.data_dir:
        yield from _embedded(args.data_dir)
    else:
        yield from _zookeeper(args.zookeeper)


def _embedded(data_dir: str) -> Iterator[tuple[UserCredentials, Writer]]:
    store = EmbeddedMetadataStore(data_dir, broker_id=0)

    async def start() -> None:
        await store.start()

    def write(changes: CredentialChanges) -> None:
        try:
            asyncio.run(store.alter_scram_credentials(changes))
        except MetadataWriteError as exc:
            raise CliError(str(exc)) from None

    try:
        asyncio.run(start())
    except (OSError, ValueError, KeyError) as exc:
        raise CliError(f"cannot open the metadata store in {data_dir}: {exc}") from None
    yield store.scram_credentials(), write


def _zookeeper(connect: str) -> Iterator[tuple[UserCredentials, Writer]]:
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError
    from kazoo.handlers.threading import KazooTimeoutError

    from ..cluster.zk_data import USERS, read_user_credentials
    from ..cluster.zk_writes import write_scram_credentials
    from ..security.quotas import desanitize

    client = KazooClient(hosts=connect)
    try:
        client.start(timeout=15)
    except KazooTimeoutError:
        raise CliError(f"no ZooKeeper session with {connect} within 15 s") from None
    try:
        try:
            names = client.get_children(USERS)
        except NoNodeError:
            names = []
        current = {}
        for name in names:
            found = read_user_credentials(client.get(f"{USERS}/{name}")[0])
            if found:
                current[desanitize(name)] = found
        yield current, lambda changes: write_scram_credentials(client, changes)
    finally:
        client.stop()
        client.close()
