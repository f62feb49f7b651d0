"""The management client shared by qdstat and qdmanage: options, connection, requests.

Owns the connection options of both tools (``-b/--bus``, ``-r/--router``, ``-t/--timeout``, TLS
and SASL), the connection (proton BlockingConnection with a dynamic reply receiver via
SyncRequestResponse), and one request/response call that raises :class:`StatusError` for a
non-2xx answer. ``0.0.0.0`` (qdstat's documented default bus) means this host; the open's
hostname is the host as given (``0.0.0.0`` too), as 1.19's tools send it.

Must not import zmq, router_io or router_core.
"""
from __future__ import annotations

import argparse
import sys
from http import HTTPStatus
from typing import Any, Callable, Optional

from common.buildinfo import docs_pointer
from proton import Message, ProtonException, SSLDomain, Url
from proton.utils import BlockingConnection, LinkDetached, SyncRequestResponse

DEFAULT_BUS = "0.0.0.0"
# the last line of qdstat's and qdmanage's --help
DOCS = docs_pointer("management.md", "troubleshooting.md")


def status_name(status: int) -> str:
    """How the tools name an error status: ``NotFoundStatus`` for 404, ``Status599`` if unknown."""
    try:
        name = HTTPStatus(status).name
    except ValueError:
        return f"Status{status}"
    return "".join(word.title() for word in name.split("_")) + "Status"


class StatusError(Exception):
    """The agent answered with an error status."""

    def __init__(self, status: int, description: str) -> None:
        super().__init__(f"{status_name(status)}: {description}")
        self.status = status
        self.description = description


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Connection Options")
    group.add_argument("-b", "--bus", default=DEFAULT_BUS, metavar="URL",
                       help="URL of the messaging bus to connect to (default %(default)s)")
    group.add_argument("-r", "--router", metavar="ROUTER-ID", default=None,
                       help="router to be queried")
    # edge routers are not in the network's routing protocol: 1.19 asks one through the
    # interior it is attached to, at _edge/<id>/$management
    group.add_argument("-d", "--edge-router", metavar="EDGE-ROUTER-ID", default=None,
                       help="edge router to be queried")
    group.add_argument("-t", "--timeout", type=float, default=5.0, metavar="SECS",
                       help="maximum time to wait for a connection or a response (default "
                            "%(default)s)")
    group.add_argument("--ssl-certificate", metavar="CERT", help="client SSL certificate (PEM)")
    group.add_argument("--ssl-key", metavar="KEY", help="client SSL private key (PEM)")
    group.add_argument("--ssl-trustfile", metavar="TRUSTED-CA-DB",
                       help="trusted Certificate Authority database file (PEM)")
    group.add_argument("--ssl-password", metavar="PASSWORD", help="certificate password")
    group.add_argument("--ssl-password-file", metavar="SSL-PASSWORD-FILE",
                       help="file holding the certificate password (keeps it out of the "
                            "command line)")
    group.add_argument("--ssl-disable-peer-name-verify", action="store_true",
                       help="disables SSL peer name verification")
    group.add_argument("--sasl-mechanisms", metavar="MECHS",
                       help="allowed SASL mechanisms (space separated)")
    group.add_argument("--sasl-username", metavar="USER", help="SASL user name")
    group.add_argument("--sasl-password", metavar="PASSWORD", help="SASL password")
    group.add_argument("--sasl-password-file", metavar="SASL-PASSWORD-FILE",
                       help="file holding the SASL password (keeps it out of the command line)")


def _password_file(path: str) -> str:
    """A password kept in a file (qdstat/qdmanage --ssl/--sasl-password-file): its text,
    stripped, as 1.19's tools read it."""
    with open(path, "r", encoding="utf-8") as f:
        return f.read().strip()


def uses_ssl(opts: argparse.Namespace) -> bool:
    """TLS when the bus is amqps:// or a certificate/trust file is given (as 1.19's tools)."""
    return bool(opts.ssl_certificate or opts.ssl_trustfile or opts.bus.startswith("amqps:"))


def bus_url(bus: str, ssl: bool = False) -> str:
    """``0.0.0.0``, ``host``, ``host:port`` or a full URL -> an ``amqp[s]://host:port`` URL."""
    text = bus if "://" in bus else f"amqp://{bus}"
    url = Url(text)
    if ssl:
        url.scheme = "amqps"
    host = url.host or "127.0.0.1"
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    port = url.port or (5671 if url.scheme == "amqps" else 5672)
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{url.scheme or 'amqp'}://{host}:{port}"


def open_hostname(bus: str) -> Optional[str]:
    """The hostname the open carries: the host the user gave, ``0.0.0.0`` included, as 1.19's
    tools send it (a vhost policy selects the vhost by it)."""
    url = Url(bus if "://" in bus else f"amqp://{bus}")
    return url.host or None


def ssl_domain(opts: argparse.Namespace) -> Optional[SSLDomain]:
    """The client's TLS settings: the router's certificate is always verified (against
    --ssl-trustfile, else the system's CAs), its name too unless
    --ssl-disable-peer-name-verify; --ssl-certificate/--ssl-key present a client certificate."""
    if not uses_ssl(opts):
        return None
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    if opts.ssl_trustfile:
        domain.set_trusted_ca_db(str(opts.ssl_trustfile))
    if opts.ssl_disable_peer_name_verify:
        domain.set_peer_authentication(SSLDomain.VERIFY_PEER)
    else:
        domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
    if opts.ssl_certificate:
        password = opts.ssl_password
        if getattr(opts, "ssl_password_file", None):
            password = _password_file(opts.ssl_password_file)
        domain.set_credentials(str(opts.ssl_certificate), opts.ssl_key or None, password)
    return domain


PAGE = 500  # QUERY rows per request


def plain(value: Any) -> Any:
    """A management answer with builtin types: a 1.x router answers with proton's typed numbers
    (``int32``, ``uint``, ``ulong``...) and symbols, which would print as ``uint(1)``."""
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value


def management_address(router: Optional[str], edge_router: Optional[str] = None) -> str:
    if edge_router:
        return f"amqp:/_edge/{edge_router}/$management"
    return f"amqp:/_topo/0/{router}/$management" if router else "$management"


class ManagementClient:
    """One connection to a router's management agent."""

    def __init__(self, opts: argparse.Namespace) -> None:
        kwargs: dict[str, Any] = {}
        if opts.sasl_mechanisms:
            kwargs["allowed_mechs"] = opts.sasl_mechanisms
        if opts.sasl_username:
            kwargs["user"] = opts.sasl_username
            kwargs["allow_insecure_mechs"] = True
        url = Url(opts.bus if "://" in opts.bus else f"amqp://{opts.bus}")
        if url.username and "user" not in kwargs:
            kwargs["user"] = url.username
        password = opts.sasl_password or url.password
        if getattr(opts, "sasl_password_file", None):
            password = _password_file(opts.sasl_password_file)
        if password:
            kwargs["password"] = password
            kwargs["allow_insecure_mechs"] = True
        self.timeout = opts.timeout
        domain = ssl_domain(opts)
        # as 1.x's tools: no SASL layer at all unless TLS or a SASL option (or a user or password
        # in the URL) asks for one, so the router shows the connection as no-auth
        sasl = bool(domain or opts.sasl_mechanisms or "user" in kwargs or password
                    or getattr(opts, "sasl_password_file", None))
        hostname = open_hostname(opts.bus)
        if hostname:
            kwargs["virtual_host"] = hostname
        self.conn = BlockingConnection(bus_url(opts.bus, uses_ssl(opts)), timeout=opts.timeout,
                                       ssl_domain=domain, sasl_enabled=sasl, **kwargs)
        self.address = management_address(opts.router, getattr(opts, "edge_router", None))
        self.rr = SyncRequestResponse(self.conn, self.address)

    def set_router(self, router: Optional[str]) -> None:
        """Direct further requests to another router's agent (for --all-routers)."""
        self.address = management_address(router)
        self.rr.sender.close()
        self.rr.sender = self.conn.create_sender(self.address)

    def call(self, operation: str, body: Any = None, **properties: Any) -> Any:
        """Send one request; return the response body; raise StatusError for an error status."""
        props = {"operation": operation}
        props.update({k: v for k, v in properties.items() if v is not None})
        reply = self.rr.call(Message(properties=props, body=body))
        status = int((reply.properties or {}).get("statusCode", 500))
        if status >= 300:
            raise StatusError(status, str((reply.properties or {}).get("statusDescription", "")))
        return plain(reply.body)

    def query(self, entity_type: Optional[str], attribute_names: Optional[list] = None,
              count: Optional[int] = None) -> list[dict]:
        """Every entity of the type (at most ``count``; 0 or None: no limit, as 1.19's tools),
        asked for PAGE rows at a time so that no answer is too large to carry (a proton
        client decodes at most 65,535 values)."""
        count = count or None
        out: list[dict] = []
        offset = 0
        while count is None or len(out) < count:
            want = PAGE if count is None else min(PAGE, count - len(out))
            body = self.call("QUERY", {"attributeNames": attribute_names or []},
                             entityType=entity_type, offset=offset or None, count=want)
            names = body.get("attributeNames", [])
            rows = body.get("results", [])
            out += [dict(zip(names, row)) for row in rows]
            if len(rows) < want:
                break
            offset += len(rows)
        return out

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:  # closing after a failure must not hide the failure
            pass


def run_tool(opts: argparse.Namespace, work: Callable[[ManagementClient], None],
             usage_errors: tuple = ()) -> int:
    """What qdstat and qdmanage share: open a client, run ``work`` with it, always close it.

    Exit status 0; 1 with the error on stderr for an error status, a connection or protocol
    failure (or Ctrl-C); 2 for one of ``usage_errors``."""
    client = None
    try:
        client = ManagementClient(opts)
        work(client)
        return 0
    except StatusError as exc:
        print(str(exc), file=sys.stderr)
    except usage_errors as exc:
        print(f"Usage error: {exc}", file=sys.stderr)
        return 2
    except (ProtonException, LinkDetached, OSError) as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        pass
    finally:
        if client is not None:
            client.close()
    return 1
