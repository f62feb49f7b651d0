"""Support for the pipeline tests: why they would skip, and the small data set they share.

The data is made by the real producer: synthetic core snapshots go through
``agent.metrics.snapshot_records`` (so the tests break if the record shape and the Spark schema
drift apart), loadgen lines follow ``benchmarks/loadgen.py``'s "loadgen/1" shape.

Scenario (T0 is a multiple of 10, windows are 10 s):
  R1 samples every 10 s at T0, T0+10, T0+20, T0+30 (the first has null deltas).
    q1: ingress deltas 100, 199, 301 (one message sent in T0+19 counted in the next interval);
        egress 100, 200, 300; inbound link 1 accepted 90/180/300, released 10/20/0; the
        outbound link 2 reports accepted too (must not count in the outcome mix).
    q2: presettled, ingress 50 each interval, egress 50 each.
  R2 samples at T0+5, T0+15, T0+25: q3 ingress 10, 20 and bytes 1000, 2000.
  Clients on q1: a sender (sent = settled = 10/s, 20/s, 30/s per window) and a receiver
    (received 100, 200, 295; per-second p50 100+i in window 1, 200 in 2, 300 in 3 with one
    second untimed; p99 509, 900, 700 at most).

No conftest.py in this folder on purpose: the system tests do ``from conftest import ...`` and a
second conftest module would shadow the root one. The ``spark`` fixture is defined here and
imported by each test module; the repository root (``pipelines`` lives there, not under src/)
is added to sys.path here too. Each test module calls ``skip_unless_spark()`` before importing
pyspark: the tests skip, with the reason, only when pyspark or Java is missing
(scripts/install.sh installs both, so in CI they run).
"""
from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from agent.metrics import snapshot_records

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

T0 = 1_700_000_000


@functools.lru_cache(maxsize=None)
def skip_reason() -> Optional[str]:
    """None when the Spark tests can run, else why not."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed (pip install -e '.[spark]'; scripts/install.sh --test)"
    java_home = os.environ.get("JAVA_HOME")
    java = (str(Path(java_home) / "bin" / "java") if java_home else None) or shutil.which("java")
    if not java or not Path(java).exists():
        return "no Java runtime for Spark (apt-get install openjdk-17-jre-headless)"
    try:
        subprocess.run([java, "-version"], capture_output=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError) as e:
        return f"Java runtime for Spark does not run: {e}"
    return None


def skip_unless_spark() -> None:
    """Skip the calling test module (at import, before it imports pyspark) when Spark can't run."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason, allow_module_level=True)


@functools.lru_cache(maxsize=None)
def _session():
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("pipelines-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.session.timeZone", "UTC")
               # tiny data: few tasks, no adaptive re-planning, no code generation
               .config("spark.sql.shuffle.partitions", "1")
               .config("spark.default.parallelism", "2")
               .config("spark.sql.adaptive.enabled", "false")
               .config("spark.sql.codegen.wholeStage", "false")
               .config("spark.sql.codegen.factoryMode", "NO_CODEGEN")  # internal; ~20% faster
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    return session


@pytest.fixture(scope="session")
def spark():
    """One local[2] SparkSession for the whole test session (each module imports this fixture;
    both get the same session, stopped once at the end)."""
    session = _session()
    yield session
    if session.sparkContext._jsc is not None:
        session.stop()


def _router(**counters) -> dict:
    base = {"id": "?", "addrCount": 0, "linkCount": 0, "connectionCount": 1,
            "deliveriesIngress": 0, "deliveriesEgress": 0, "deliveriesTransit": 0,
            "deliveriesIngressRouteContainer": 0, "deliveriesEgressRouteContainer": 0,
            "acceptedDeliveries": 0, "rejectedDeliveries": 0, "releasedDeliveries": 0,
            "modifiedDeliveries": 0, "presettledDeliveries": 0, "droppedPresettledDeliveries": 0}
    base.update(counters)
    return base


def _address(key: str, **counters) -> dict:
    base = {"identity": key, "key": key, "distribution": "balanced", "subscriberCount": 1,
            "remoteCount": 0, "containerCount": 0, "deliveriesIngress": 0,
            "deliveriesEgress": 0, "deliveriesTransit": 0, "deliveriesToContainer": 0,
            "deliveriesFromContainer": 0}
    base.update(counters)
    return base


def _link(identity: int, direction: str, owning: str, **counters) -> dict:
    base = {"identity": str(identity), "linkName": f"l{identity}", "linkDir": direction,
            "owningAddr": owning, "connectionId": 1, "capacity": 250, "undeliveredCount": 0,
            "unsettledCount": 0, "creditAvailable": 250, "deliveryCount": 0,
            "presettledCount": 0, "droppedPresettledCount": 0, "acceptedCount": 0,
            "rejectedCount": 0, "releasedCount": 0, "modifiedCount": 0}
    base.update(counters)
    return base


def _cumulative(deltas: list[int], start: int = 0) -> list[int]:
    out, total = [start], start
    for d in deltas:
        total += d
        out.append(total)
    return out


def r1_snapshots() -> list[dict]:
    # q1 starts with the data (its exact totals are what the clients sent); q2 has a history
    q1_in, q1_out = _cumulative([100, 199, 301]), _cumulative([100, 200, 300])
    q2_in, q2_out = _cumulative([50, 50, 50], 500), _cumulative([50, 50, 50], 500)
    acc, rel = _cumulative([90, 180, 300]), _cumulative([10, 20, 0])
    snaps = []
    for i in range(4):
        snaps.append({
            "router": _router(id="R1", addrCount=2, linkCount=3,
                              deliveriesIngress=q1_in[i] + q2_in[i],
                              deliveriesEgress=q1_out[i] + q2_out[i],
                              acceptedDeliveries=acc[i], releasedDeliveries=rel[i],
                              presettledDeliveries=q2_in[i]),
            "addresses": [_address("M0q1", deliveriesIngress=q1_in[i],
                                   deliveriesEgress=q1_out[i]),
                          _address("M0q2", deliveriesIngress=q2_in[i],
                                   deliveriesEgress=q2_out[i])],
            "links": [_link(1, "in", "M0q1", deliveryCount=q1_in[i], acceptedCount=acc[i],
                            releasedCount=rel[i]),
                      _link(2, "out", "M0q1", deliveryCount=q1_out[i], acceptedCount=q1_out[i]),
                      _link(3, "in", "M0q2", deliveryCount=q2_in[i],
                            presettledCount=q2_in[i])],
            "connections": []})
    return snaps


def r2_snapshots() -> list[dict]:
    q3, b3 = _cumulative([10, 20]), _cumulative([1000, 2000])
    return [{"router": _router(id="R2", addrCount=1, deliveriesIngress=q3[i],
                               deliveriesEgress=q3[i], bytesIngress=b3[i]),
             "addresses": [_address("M0q3", deliveriesIngress=q3[i], deliveriesEgress=q3[i],
                                    bytesIngress=b3[i])],
             "links": [], "connections": []} for i in range(3)]


def records_of(snaps: list[dict], router_id: str, first_ts: float,
               with_deltas: bool = True) -> list[dict]:
    out, previous = [], None
    for i, snap in enumerate(snaps):
        out.extend(snapshot_records(snap, router_id, first_ts + 10 * i, 10.0,
                                    previous if with_deltas else None))
        previous = snap
    return out


def metrics_records(with_deltas: bool = True) -> list[dict]:
    return (records_of(r1_snapshots(), "R1", T0, with_deltas)
            + records_of(r2_snapshots(), "R2", T0 + 5, with_deltas))


def loadgen_lines() -> list[dict]:
    sender_ps, receiver_ps = [], []
    for i in range(30):
        t = T0 + i
        rate = (10, 20, 30)[i // 10]
        sender_ps.append({"t": t, "sent": rate, "settled": rate, "received": 0,
                          "p50_us": None, "p99_us": None})
        if i < 10:
            p50, p99 = 100 + i, 500 + i
        elif i < 20:
            p50, p99 = 200, 900 if i == 15 else 600
        else:
            p50, p99 = (None, None) if i == 20 else (300, 700)
        received = 25 if i == 29 else rate
        receiver_ps.append({"t": t, "sent": 0, "settled": 0, "received": received,
                            "p50_us": p50, "p99_us": p99})
    common = {"schema": "loadgen/1", "run_id": "run-1", "url": "127.0.0.1:5672",
              "address": "q1", "listen": False, "target_count": 600, "body_size": 100,
              "presettled": False, "start_ts": T0 + 0.1, "end_ts": T0 + 29.9,
              "elapsed_s": 29.8, "cpu_user_s": 0.5, "cpu_sys_s": 0.1, "error": None}
    sender = dict(common, role="sender", pid=101, count=600, credit=None, window=None,
                  msgs_per_s=600 / 29.8, cpu_us_per_msg=1000.0, lat_p50_us=None,
                  lat_p90_us=None, lat_p99_us=None, lat_max_us=None, lat_missing=None,
                  accepted=600, released=0, rejected=0, modified=0, settled=600,
                  per_second=sender_ps)
    receiver = dict(common, role="receiver", pid=102, count=595, credit=250, window=None,
                    msgs_per_s=595 / 29.8, cpu_us_per_msg=1000.0, lat_p50_us=200,
                    lat_p90_us=300, lat_p99_us=900, lat_max_us=1000, lat_missing=30,
                    accepted=None, released=None, rejected=None, modified=None, settled=None,
                    per_second=receiver_ps, paths=[{"path": ["R1"], "count": 595}])
    return [sender, receiver]


def write_jsonl(path: Path, records: list[dict], junk: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
        if junk:
            f.write('{"schema": "something-else/1", "ts": 1.0}\n')
            f.write("not json at all\n")
    return path
