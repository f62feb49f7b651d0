"""A real AMQP broker for the tests: proton-C's example broker, compiled here and run as a process.

Debian ships its source in ``libqpid-proton11-dev-examples`` (``scripts/install.sh --test``
installs it): ``/usr/share/proton/examples/c/broker.c``. It keeps one in-memory queue per address
(created on first use), accepts every message it receives, and gives each queued message to one
of the receivers of its address. Its container-id is its ``argv[0]``, so each broker started here
gets the container id the test asks for (link routes and auto-links by ``containerId``).

``c_broker`` is a factory fixture: ``c_broker("broker.A")`` starts one on a free loopback port;
every broker a test starts is stopped at teardown. The binary is built once per source version
into ``~/.cache/qdrouter-py/`` (or ``$QDROUTER_TEST_CACHE``).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

EXAMPLES = Path("/usr/share/proton/examples/c")
SOURCES = ("broker.c", "thread.h")
START_TIMEOUT = 10.0


class BrokerUnavailable(RuntimeError):
    pass


def _cache_dir() -> Path:
    root = os.environ.get("QDROUTER_TEST_CACHE") or Path.home() / ".cache" / "qdrouter-py"
    return Path(root) / "cbroker"


def build_broker() -> Path:
    """The path of the compiled example broker (built now if missing)."""
    missing = [name for name in SOURCES if not (EXAMPLES / name).exists()]
    if missing:
        raise BrokerUnavailable(f"{EXAMPLES}/{missing[0]} is missing "
                                "(apt-get install libqpid-proton11-dev-examples)")
    digest = hashlib.sha256(b"".join((EXAMPLES / n).read_bytes() for n in SOURCES))
    target = _cache_dir() / f"broker-{digest.hexdigest()[:12]}"
    if target.exists():
        return target
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise BrokerUnavailable("no C compiler (apt-get install gcc)")
    try:
        flags = subprocess.run(
            ["pkg-config", "--cflags", "--libs", "libqpid-proton"],
            capture_output=True, text=True, check=True, timeout=30).stdout.split()
    except (OSError, subprocess.SubprocessError) as exc:
        raise BrokerUnavailable(f"proton-C headers not found ({exc}; "
                                "apt-get install libqpid-proton11-dev)") from None
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    proc = subprocess.run([cc, "-O2", "-o", str(tmp), str(EXAMPLES / "broker.c"),
                           f"-I{EXAMPLES}", *flags, "-lpthread"],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BrokerUnavailable(f"the example broker did not compile:\n{proc.stderr}")
    tmp.replace(target)  # atomic: parallel test processes never run half a binary
    return target


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    """One running example broker: ``port``, ``container_id``, ``stop()``, ``restart()``."""

    def __init__(self, binary: Path, container_id: str, port: int | None = None) -> None:
        self.binary = binary
        self.container_id = container_id
        self.port = port or _free_port()
        self.proc: subprocess.Popen | None = None
        self.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        # argv[0] is the broker's container-id; the executable is the compiled binary
        self.proc = subprocess.Popen([self.container_id, "127.0.0.1", str(self.port)],
                                     executable=str(self.binary), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrokerUnavailable(f"broker {self.container_id} exited with "
                                        f"{self.proc.returncode} at start")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise BrokerUnavailable(f"broker {self.container_id} did not listen on {self.port}")

    def stop(self) -> None:
        """Kill it (a broker that goes away: its queues are lost, its connections drop)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def restart(self) -> None:
        """Stop it and start it again on the same port, empty."""
        self.stop()
        self.start()


@pytest.fixture(scope="session")
def c_broker_binary() -> Path:
    """The compiled broker; without the package the tests that need it are skipped, unless
    ROUTER_REQUIRE_BROKER=1 (CI: a missing broker fails instead of hiding those tests)."""
    try:
        return build_broker()
    except BrokerUnavailable as exc:
        if os.environ.get("ROUTER_REQUIRE_BROKER") == "1":
            pytest.fail(f"ROUTER_REQUIRE_BROKER=1: {exc}")
        pytest.skip(str(exc))


@pytest.fixture
def c_broker(c_broker_binary):
    """Factory: ``c_broker(container_id="broker")`` -> a running :class:`Broker`."""
    started: list = []

    def start(container_id: str = "broker", port: int | None = None) -> Broker:
        broker = Broker(c_broker_binary, container_id, port)
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.stop()
