"""The jobs on a real Spark standalone cluster and the streaming job on files arriving live.

A master and one worker (1 core, 1 GiB) are started from the installed pyspark distribution
(``bin/spark-class``) on 127.0.0.1 with free ports, logs in a temp dir; every wait is bounded and
both are stopped whatever happens. The batch job runs as a CLI subprocess with
``--master spark://127.0.0.1:P`` (its own driver; the executors run on the worker) and its
Parquet output must equal that of the same job in the shared local session.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spark_support import skip_unless_spark

skip_unless_spark()

from agent.metrics_sink import MetricsSink  # noqa: E402
from pipelines import batch_job, streaming_job  # noqa: E402
from spark_support import spark  # noqa: E402,F401  (the fixture)
from spark_support import T0, loadgen_lines, metrics_records, write_jsonl  # noqa: E402
from test_jobs import write_metrics_dir  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 90.0
JOB_TIMEOUT = 240.0
TABLES = ("router_throughput", "address_throughput", "address_totals", "top_addresses",
          "network_throughput", "transit_hops", "client_latency", "reconciliation",
          "reconciliation_totals", "message_paths", "message_hops")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_home() -> Path:
    import pyspark
    return Path(pyspark.__file__).resolve().parent


def _env() -> dict:
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_HOME=str(spark_home()),
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "src"),
                                         env.get("PYTHONPATH", "")])
    return env


def _wait_for(log: Path, text: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.3)
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"
    raise AssertionError(f"{text!r} not seen in {log} within {timeout}s:\n{tail}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """spark://127.0.0.1:P with one worker; yields its URL and the worker's work dir."""
    logs = tmp_path_factory.mktemp("spark-cluster")
    env = _env()
    env["SPARK_LOG_DIR"] = str(logs)
    env["SPARK_WORKER_DIR"] = str(logs / "work")
    spark_class = str(spark_home() / "bin" / "spark-class")
    port, ui, worker_ui = free_port(), free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    procs = []
    try:
        master_log = logs / "master.log"
        with open(master_log, "wb") as out:
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(port), "--webui-port", str(ui)],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True))
        _wait_for(master_log, "I have been elected leader", procs[0], START_TIMEOUT)
        worker_log = logs / "worker.log"
        with open(worker_log, "wb") as out:
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host",
                 "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", str(worker_ui),
                 "--work-dir", str(logs / "work")],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True))
        _wait_for(worker_log, "Successfully registered with master", procs[1], START_TIMEOUT)
        yield {"url": url, "work": logs / "work"}
    finally:
        for proc in reversed(procs):
            _stop(proc)


def _rows(spark, path: Path, table: str) -> list:
    df = spark.read.parquet(str(path / table))
    return sorted((tuple(r) for r in df.select(*sorted(df.columns)).collect()), key=repr)


def test_batch_job_on_a_standalone_cluster_matches_local(spark, cluster, tmp_path):
    write_metrics_dir(tmp_path / "metrics", junk=True)
    lg = write_jsonl(tmp_path / "loadgen.jsonl", loadgen_lines())
    common = ["--metrics-dir", str(tmp_path / "metrics"), "--loadgen", str(lg),
              "--window", "10s", "--top", "2"]
    assert batch_job.main(common + ["--out", str(tmp_path / "local")], spark=spark) == 0
    res = subprocess.run(
        # --no-class-archive: a first run would spend its last minute writing the JVM's
        # class archive, which is not what this test is about
        [sys.executable, "-m", "pipelines.batch_job", *common, "--out",
         str(tmp_path / "cluster"), "--master", cluster["url"], "--no-class-archive"],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=JOB_TIMEOUT)
    assert res.returncode == 0, res.stderr[-4000:]
    assert "q1: 600 / 600 / 600 / 595" in res.stdout
    for table in TABLES:
        assert _rows(spark, tmp_path / "cluster", table) == \
            _rows(spark, tmp_path / "local", table), table
    # the executors ran on the worker (its work dir has the application's executor)
    assert list(cluster["work"].glob("app-*/*/stderr")), "no executor ran on the worker"


def test_streaming_job_on_files_arriving(spark, tmp_path):
    """Closed files appear while the query runs (trigger every second); windows the watermark
    has passed are appended to Parquet as they come."""
    metrics_dir = tmp_path / "metrics"
    out = tmp_path / "out"
    args = streaming_job.parse_args(["--metrics-dir", str(metrics_dir), "--out", str(out),
                                     "--window", "10s", "--watermark", "0s",
                                     "--trigger", "1s"])
    metrics_dir.mkdir()
    recs = [r for r in metrics_records() if r["router_id"] == "R1"]
    sink = MetricsSink(metrics_dir, "R1", max_bytes=1 << 30, keep_files=100)
    queries = streaming_job.start(spark, args)
    try:
        def windows() -> dict:
            if not (out / "router_throughput").exists():
                return {}
            try:
                rows = spark.read.parquet(str(out / "router_throughput")).collect()
            except Exception:  # noqa: BLE001 - no Parquet file committed yet
                return {}
            return {int(r["window_start"].timestamp()): r["ingress"] for r in rows}

        def wait(pred, timeout=90.0):
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                got = windows()
                if pred(got):
                    return got
                for q in queries:
                    assert q.exception() is None, q.exception()
                time.sleep(0.5)
            raise AssertionError(f"streaming output not there in {timeout}s: {windows()}")

        for ts in sorted({r["ts"] for r in recs})[:3]:  # T0, T0+10, T0+20
            sink.write([r for r in recs if r["ts"] == ts])
            sink.rotate()
        assert wait(lambda got: T0 in got)[T0] == 150       # [T0, T0+10) closed by T0+15
        assert T0 + 10 not in windows()                     # still open
        sink.write([r for r in recs if r["ts"] == T0 + 30])
        sink.rotate()
        got = wait(lambda got: T0 + 10 in got)
        assert got[T0 + 10] == 249
    finally:
        for q in queries:
            q.stop()
