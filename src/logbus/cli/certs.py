"""`logbus certs`: a CA, a broker certificate and client certificates for trying TLS locally.

Made with the `openssl` command, as these commands (DIR, HOSTS and NAME as given):

    openssl req -x509 -newkey rsa:2048 -nodes -days 825 -subj /CN=logbus-ca \\
        -keyout DIR/ca.key -out DIR/ca.pem
    openssl req -newkey rsa:2048 -nodes -subj /O=logbus/CN=logbus-broker -keyout DIR/broker.key -out DIR/broker.csr
    openssl x509 -req -in DIR/broker.csr -CA DIR/ca.pem -CAkey DIR/ca.key -CAcreateserial -days 825 \\
        -extfile <(printf 'subjectAltName=IP:127.0.0.1,DNS:localhost') -out DIR/broker.crt
    cat DIR/broker.key DIR/broker.crt > DIR/broker.pem          # ssl.keystore.location
    (the same with -subj /O=logbus/OU=clients/CN=NAME and no SAN for each client: DIR/NAME.pem)

Not for production: keys are unencrypted and the CA key sits beside them.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import shutil
import subprocess
import tempfile

from .common import CliError

DAYS = "825"  # the longest validity Apple's TLS clients accept


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("certs", help="make a CA and certificates for local TLS testing")
    parser.add_argument("--out", required=True, help="directory for the PEM files")
    parser.add_argument("--hosts", default="127.0.0.1,localhost",
                        help="host names and IPs the broker certificate is valid for (default 127.0.0.1,localhost)")
    parser.add_argument("--client", action="append", default=[], metavar="NAME",
                        help="also make a client certificate CN=NAME,OU=clients,O=logbus (repeatable)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if shutil.which("openssl") is None:
        raise CliError("the openssl command is needed (Debian: apt-get install openssl)")
    os.makedirs(args.out, exist_ok=True)
    ca_key, ca_cert = os.path.join(args.out, "ca.key"), os.path.join(args.out, "ca.pem")
    if not os.path.exists(ca_cert):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", DAYS, "-subj", "/CN=logbus-ca",
                 "-keyout", ca_key, "-out", ca_cert)
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
    _signed(args.out, "broker", "/O=logbus/CN=logbus-broker", ca_key, ca_cert, _san(hosts))
    for name in args.client:
        _signed(args.out, name, f"/O=logbus/OU=clients/CN={name}", ca_key, ca_cert, None)
    print(f"CA: {ca_cert} (ssl.truststore.location); broker: {os.path.join(args.out, 'broker.pem')} "
          f"(ssl.keystore.location)" + "".join(f"; client {n}: {os.path.join(args.out, n)}.pem" for n in args.client))
    return 0


def _san(hosts: list[str]) -> str:
    return "subjectAltName=" + ",".join(f"IP:{h}" if _is_ip(h) else f"DNS:{h}" for h in hosts)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _signed(out: str, name: str, subject: str, ca_key: str, ca_cert: str, extension: str | None) -> None:
    """NAME.key, NAME.crt and NAME.pem (key then certificate) in `out`, signed by the CA."""
    key, cert = os.path.join(out, f"{name}.key"), os.path.join(out, f"{name}.crt")
    with tempfile.TemporaryDirectory() as scratch:
        request = os.path.join(scratch, "request.csr")
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", key, "-out", request)
        extra: list[str] = []
        if extension:
            extfile = os.path.join(scratch, "ext.cnf")
            with open(extfile, "w", encoding="utf-8") as handle:
                handle.write(extension + "\n")
            extra = ["-extfile", extfile]
        _openssl("x509", "-req", "-in", request, "-CA", ca_cert, "-CAkey", ca_key, "-CAcreateserial",
                 "-CAserial", os.path.join(out, "ca.srl"), "-days", DAYS, *extra, "-out", cert)
    with open(os.path.join(out, f"{name}.pem"), "w", encoding="utf-8") as pem:
        for part in (key, cert):
            with open(part, encoding="utf-8") as handle:
                pem.write(handle.read())
    os.chmod(os.path.join(out, f"{name}.pem"), 0o600)


def _openssl(*args: str) -> None:
    done = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise CliError(f"openssl {args[0]} failed: {done.stderr.strip()}")
