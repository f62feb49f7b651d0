"""A small authentication service for the authServicePlugin tests, as 1.19 expects one.

It authenticates with Cyrus SASL (a sasldb the test makes with saslpasswd2: tlscerts.make_sasldb)
and answers the router's open with the properties 1.19 reads: ``authenticated-identity`` (a map,
``sub``: the SASL user) and ``address-authz`` (address -> array of ``send``/``recv``) for the
users it has grants for; a user without grants gets no ``address-authz`` (nothing restricted).
It records each open it gets (hostname, desired capabilities, properties) in a JSON-lines file
when asked, so tests can check what the router sent.

As a process: ``python tests/authsvc.py --port P --sasl-dir DIR --grants JSON
[--cert F --key F] [--opens FILE]``; prints ``ready`` once listening, runs until killed.
In memory (unit tests): :class:`ServiceEngine`, a proton server transport with the same answers.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Optional

import proton
from proton import Array, Data, SSLDomain, UNDESCRIBED, symbol
from proton.handlers import MessagingHandler
from proton.reactor import Container


def open_properties(user: str, grants: dict) -> dict:
    """The service's open properties for ``user`` (``grants``: user -> {address: [perms]})."""
    props = {symbol("authenticated-identity"): {symbol("sub"): user}}
    if user in grants:
        props[symbol("address-authz")] = {
            address: Array(UNDESCRIBED, Data.STRING, *perms)
            for address, perms in grants[user].items()}
    return props


def transport_output(transport: proton.Transport) -> bytes:
    """Every byte an in-memory proton transport has to send now."""
    out = bytearray()
    while transport.pending() > 0:
        n = transport.pending()
        out += transport.peek(n)
        transport.pop(n)
    return bytes(out)


class ServiceEngine:
    """The service's end of one connection in memory (a proton server transport with Cyrus
    SASL configured from ``sasl_dir``/``qdrouterd.conf``)."""

    def __init__(self, sasl_dir: str, grants: dict, mechs: Optional[str] = None) -> None:
        self.grants = grants
        self.transport = proton.Transport(proton.Transport.SERVER)
        sasl = self.transport.sasl()
        sasl.config_path(sasl_dir)
        sasl.config_name("qdrouterd")
        if mechs:
            sasl.allowed_mechs(mechs)
        sasl.allow_insecure_mechs = True
        self.transport.require_auth(True)
        self.connection = proton.Connection()
        self.collector = proton.Collector()
        self.connection.collect(self.collector)
        self.transport.bind(self.connection)
        self.remote_opens: list = []

    def push(self, data: bytes) -> None:
        if data:
            self.transport.push(data)
        self._events()

    def output(self) -> bytes:
        return transport_output(self.transport)

    def _events(self) -> None:
        while True:
            event = self.collector.peek()
            if event is None:
                return
            self.collector.pop()
            if event.type == proton.Event.CONNECTION_REMOTE_OPEN:
                conn = self.connection
                self.remote_opens.append((conn.remote_hostname, conn.remote_desired_capabilities,
                                          conn.remote_properties))
                conn.properties = open_properties(self.transport.user, self.grants)
                conn.open()
            elif event.type == proton.Event.CONNECTION_REMOTE_CLOSE:
                self.connection.close()


class EngineHost:
    """ServiceEngines in a child process of their own, driven over pipes.

    Cyrus reads its server configuration (``config_path``) once per process, when the first
    server transport with SASL starts: a test process that made one before (the fuzz tests, a
    broker in a system test) would have Cyrus read some other directory, and every password
    here would fail. The child process starts Cyrus with ``sasl_dir``. ``new()`` returns a
    stand-in with the ServiceEngine's ``push``/``output``/``remote_opens``."""

    def __init__(self, sasl_dir: str, timeout: float = 30.0) -> None:
        import subprocess
        self.timeout = timeout
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--host-engines", "--sasl-dir", sasl_dir],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._ids = 0

    def call(self, *request):
        import pickle
        import select
        blob = pickle.dumps(request)
        self.proc.stdin.write(len(blob).to_bytes(4, "big") + blob)
        self.proc.stdin.flush()
        if not select.select([self.proc.stdout], [], [], self.timeout)[0]:
            raise TimeoutError(f"the service engine host did not answer {request[0]!r}")
        size = int.from_bytes(self.proc.stdout.read(4) or b"\0\0\0\0", "big")
        ok, value = pickle.loads(self.proc.stdout.read(size))
        if not ok:
            raise RuntimeError(f"service engine host: {value}")
        return value

    def new(self, grants: dict, mechs: Optional[str] = None) -> "RemoteEngine":
        self._ids += 1
        self.call("new", self._ids, grants, mechs)
        return RemoteEngine(self, self._ids)

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=self.timeout)
        except Exception:  # noqa: BLE001 - it must not outlive the test
            self.proc.kill()
            self.proc.wait()


class RemoteEngine:
    """One ServiceEngine of an EngineHost."""

    def __init__(self, host: EngineHost, ident: int) -> None:
        self.host = host
        self.ident = ident

    def push(self, data: bytes) -> None:
        self.host.call("push", self.ident, data)

    def output(self) -> bytes:
        return self.host.call("output", self.ident)

    @property
    def remote_opens(self) -> list:
        return self.host.call("opens", self.ident)


def _host_engines(sasl_dir: str) -> int:
    """The child of EngineHost: requests in, answers out, length-prefixed pickles."""
    import pickle
    engines: dict = {}
    read, write = sys.stdin.buffer, sys.stdout.buffer
    while True:
        head = read.read(4)
        if len(head) < 4:
            return 0
        op, ident, *args = pickle.loads(read.read(int.from_bytes(head, "big")))
        try:
            if op == "new":
                engines[ident] = ServiceEngine(sasl_dir, *args)
                value = None
            elif op == "push":
                value = engines[ident].push(args[0])
            elif op == "output":
                value = engines[ident].output()
            else:  # "opens": plain values (proton's types do not pickle)
                value = [(host, [str(c) for c in (caps.elements if isinstance(caps, Array)
                                                  else caps or [])],
                          {str(k): str(v) for k, v in (props or {}).items()})
                         for host, caps, props in engines[ident].remote_opens]
            answer = pickle.dumps((True, value))
        except Exception as exc:  # noqa: BLE001 - reported to the test
            answer = pickle.dumps((False, repr(exc)))
        write.write(len(answer).to_bytes(4, "big") + answer)
        write.flush()


class Service(MessagingHandler):
    def __init__(self, port: int, grants: dict, ssl: Optional[SSLDomain],
                 opens: Optional[str]) -> None:
        super().__init__()
        self.port = port
        self.grants = grants
        self.ssl = ssl
        self.opens = opens

    def on_start(self, event) -> None:
        event.container.listen(f"127.0.0.1:{self.port}", ssl_domain=self.ssl)
        print("ready", flush=True)

    def on_connection_bound(self, event) -> None:
        # before the first byte: PLAIN without TLS too (proton refuses it by default), and
        # every client authenticated
        sasl = event.transport.sasl()
        sasl.allow_insecure_mechs = True
        event.transport.require_auth(True)

    def on_connection_opening(self, event) -> None:
        conn = event.connection
        if self.opens:
            caps = conn.remote_desired_capabilities
            caps = list(caps.elements) if isinstance(caps, Array) else list(caps or [])
            with open(self.opens, "a", encoding="utf-8") as f:
                f.write(json.dumps({
                    "hostname": conn.remote_hostname, "user": event.transport.user,
                    "capabilities": [str(c) for c in caps or []],
                    "properties": {str(k): str(v) for k, v in
                                   (conn.remote_properties or {}).items()}}) + "\n")
        conn.properties = open_properties(event.transport.user, self.grants)


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int)
    parser.add_argument("--host-engines", action="store_true")
    parser.add_argument("--sasl-dir", required=True)
    parser.add_argument("--grants", default="{}")
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--opens")
    args = parser.parse_args(argv)
    if args.host_engines:
        return _host_engines(args.sasl_dir)
    if args.port is None:
        parser.error("--port is required")
    from cproton_ffi import ffi, lib
    # Cyrus' server configuration is process-wide (NULL: not one transport's)
    lib.pn_sasl_config_path(ffi.NULL, args.sasl_dir.encode())
    lib.pn_sasl_config_name(ffi.NULL, b"qdrouterd")
    ssl = None
    if args.cert:
        ssl = SSLDomain(SSLDomain.MODE_SERVER)
        ssl.set_credentials(args.cert, args.key, None)
    Container(Service(args.port, json.loads(args.grants), ssl, args.opens)).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
