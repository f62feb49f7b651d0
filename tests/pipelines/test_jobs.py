"""The job scripts end to end on generated files in a temp dir (in-process, sharing the local
session; the CLI itself is checked with --help in a subprocess, which starts no JVM)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from spark_support import skip_unless_spark

skip_unless_spark()

from agent.metrics_sink import MetricsSink  # noqa: E402
from pipelines import batch_job, streaming_job  # noqa: E402
from spark_support import spark  # noqa: E402,F401  (the fixture)
from spark_support import T0, loadgen_lines, metrics_records, write_jsonl  # noqa: E402
from spark_support import _address, _router  # noqa: E402
from agent.metrics import snapshot_records  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_metrics_dir(directory: Path, junk: bool = False) -> None:
    """The scenario's records, split the way a MetricsSink per router leaves them on disk:
    closed files (.1, .2, ...) and an active one."""
    for router_id in ("R1", "R2"):
        recs = [r for r in metrics_records() if r["router_id"] == router_id]
        sink = MetricsSink(directory, router_id, max_bytes=1 << 30, keep_files=100)
        for ts in sorted({r["ts"] for r in recs}):
            sink.write([r for r in recs if r["ts"] == ts])
            sink.rotate()
    if junk:
        write_jsonl(directory / "router-metrics-R1.jsonl", [], junk=True)


@pytest.fixture(scope="module")
def batch_out(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("batch")
    write_metrics_dir(base / "metrics", junk=True)
    lg = write_jsonl(base / "loadgen.jsonl", loadgen_lines())
    out = base / "out"
    rc = batch_job.main(["--metrics-dir", str(base / "metrics"), "--loadgen", str(lg),
                         "--out", str(out), "--window", "10s", "--top", "2"], spark=spark)
    assert rc == 0
    return out


def test_batch_writes_parquet_tables(spark, batch_out):
    for table in ("router_throughput", "address_throughput", "top_addresses", "client_latency",
                  "reconciliation", "message_paths", "message_hops"):
        assert (batch_out / table / "_SUCCESS").exists(), table
    rt = spark.read.parquet(str(batch_out / "router_throughput"))
    assert rt.count() == 5
    r1 = {r["ingress"] for r in rt.filter("router_id = 'R1'").collect()}
    assert r1 == {150, 249, 351}
    assert "lat_p50_us" in rt.columns
    top = spark.read.parquet(str(batch_out / "top_addresses")).orderBy("rank").collect()
    assert [(r["address"], r["ingress"]) for r in top] == [("q1", 600), ("q2", 150)]
    rec = spark.read.parquet(str(batch_out / "reconciliation")).orderBy("window_start").collect()
    assert [r["cum_ingress_gap"] for r in rec] == [0, 1, 0]
    at = spark.read.parquet(str(batch_out / "address_throughput"))
    assert at.filter("address = 'q1'").agg({"lat_p99_us": "max"}).first()[0] == 900


def test_batch_chart_is_a_png(batch_out):
    data = (batch_out / "throughput.png").read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 1000


def test_batch_summary(batch_out):
    text = (batch_out / "summary.txt").read_text()
    assert "top address: q1 (600 deliveries in" in text
    assert "router(s) R1, R2" in text
    assert "R1: 750 deliveries in" in text and "R2: 30 deliveries in" in text
    assert "q1: 600 / 600 / 600 / 595  (not counted in: 0, not received: 5)" in text
    assert "q1: R1 (0 hop(s)): 595" in text       # the receiver's --record-trace paths


def test_batch_without_loadgen_and_missing_input(spark, tmp_path):
    write_metrics_dir(tmp_path / "metrics")
    assert batch_job.main(["--metrics-dir", str(tmp_path / "metrics"),
                           "--out", str(tmp_path / "out")], spark=spark) == 0
    assert not (tmp_path / "out" / "reconciliation").exists()
    assert "top address: q1" in (tmp_path / "out" / "summary.txt").read_text()
    assert batch_job.main(["--metrics-dir", str(tmp_path / "nothing"),
                           "--out", str(tmp_path / "out2")], spark=spark) == 2


def test_streaming_once_terminates_and_writes(spark, tmp_path):
    write_metrics_dir(tmp_path / "metrics", junk=True)     # the active file is not read
    out = tmp_path / "out"
    argv = ["--metrics-dir", str(tmp_path / "metrics"), "--out", str(out), "--window", "10s",
            "--watermark", "0s", "--once"]
    assert streaming_job.main(argv, spark=spark, timeout_s=90) == 0
    rt = spark.read.parquet(str(out / "router_throughput"))
    got = {(r["router_id"], int(r["window_start"].timestamp())): r["ingress"]
           for r in rt.collect()}
    # windows the watermark has passed (newest event time T0+25: those ending by T0+20)
    assert got[("R1", T0)] == 150 and got[("R1", T0 + 10)] == 249
    assert got[("R2", T0 + 10)] == 10
    assert ("R1", T0 + 20) not in got       # still open: waits for later data
    at = spark.read.parquet(str(out / "address_throughput"))
    q1 = {int(r["window_start"].timestamp()): r["accepted"]
          for r in at.filter("key = 'M0q1'").collect()}
    assert q1[T0] == 90 and q1[T0 + 10] == 180
    # a second run over the same checkpoint has nothing new to do and still terminates
    assert streaming_job.main(argv, spark=spark, timeout_s=90) == 0
    assert spark.read.parquet(str(out / "router_throughput")).count() == rt.count()


def test_streaming_once_reports_an_active_file_it_cannot_read(tmp_path, capsys):
    """A directory with only the file a router is still appending to (or one killed without
    stopping left): --once says so and exits non-zero, before starting Spark."""
    sink = MetricsSink(tmp_path / "metrics", "R1")
    sink.write([r for r in metrics_records() if r["router_id"] == "R1"])
    argv = ["--metrics-dir", str(tmp_path / "metrics"), "--out", str(tmp_path / "out"),
            "--once"]
    assert streaming_job.main(argv) == 2
    err = capsys.readouterr().err
    assert "not read: router-metrics-R1.jsonl" in err
    assert "no closed metrics files" in err and "nothing to process" in err
    assert not (tmp_path / "out").exists()


def test_streaming_once_reads_a_stopped_routers_file(spark, tmp_path, capsys):
    """A router that stopped closed its file (MetricsSink.close): --once reads all of it."""
    sink = MetricsSink(tmp_path / "metrics", "R1")
    sink.write([r for r in metrics_records() if r["router_id"] == "R1"])
    sink.close()
    out = tmp_path / "out"
    argv = ["--metrics-dir", str(tmp_path / "metrics"), "--out", str(out), "--window", "10s",
            "--watermark", "0s", "--once"]
    assert streaming_job.main(argv, spark=spark, timeout_s=90) == 0
    got = {int(r["window_start"].timestamp()): r["ingress"]
           for r in spark.read.parquet(str(out / "router_throughput")).collect()}
    assert got[T0] == 150 and got[T0 + 10] == 249
    err = capsys.readouterr().err
    assert "not read" not in err and "windows ending by" in err


def test_streaming_once_says_why_it_wrote_nothing(spark, tmp_path, capsys):
    """A router that ran for less than a window and stopped: one sample (counted from the
    router's start), read, but its window ends after the watermark: exit 3 and why."""
    snap = {"router": _router(id="R9", deliveriesIngress=100, deliveriesEgress=100),
            "addresses": [_address("M0q9", deliveriesIngress=100, deliveriesEgress=100)],
            "links": [], "connections": []}
    sink = MetricsSink(tmp_path / "metrics", "R9")
    sink.write(snapshot_records(snap, "R9", T0 + 7, 7.0, {}))
    sink.close()
    argv = ["--metrics-dir", str(tmp_path / "metrics"), "--out", str(tmp_path / "out"),
            "--window", "10s", "--watermark", "0s", "--once"]
    assert streaming_job.main(argv, spark=spark, timeout_s=90) == 3
    err = capsys.readouterr().err
    assert "records but wrote no window" in err and "pipelines.batch_job" in err
    assert streaming_job.main(argv, spark=spark, timeout_s=90) == 0     # nothing new
    assert "no new records" in capsys.readouterr().err


@pytest.mark.parametrize("module", ["pipelines.batch_job", "pipelines.streaming_job"])
def test_cli_help(module):
    res = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "--metrics-dir" in res.stdout and "--master" in res.stdout
    assert "docs/metrics.md" in res.stdout            # where to read more
    assert (ROOT / "docs" / "metrics.md").is_file()


def test_class_archive_written_once_then_used(tmp_path, capsys):
    """The driver JVM's class archive: the first run asks the JVM to write it under a temporary
    name, it is put in place once that JVM has exited; later runs load it. A half-written one
    whose writer is gone is removed. (The JVM here is a stand-in process that writes the file.)"""
    archive = batch_job.ClassArchive(tmp_path / "cache")
    assert archive.path is not None and archive.path.parent == tmp_path / "cache"
    stale = archive.path.with_name(f"{archive.path.name}.999999999.tmp")
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"half")
    opts = archive.options()
    # the slow first run is announced before the JVM starts, not after it
    announced = capsys.readouterr().err
    assert "first run" in announced and str(archive.path.parent) in announced
    assert not stale.exists()
    assert f"-XX:ArchiveClassesAtExit={archive.writing}" in opts and "-Xlog:disable" in opts
    jvm = subprocess.Popen(["sh", "-c", f"cat >/dev/null; printf archive > '{archive.writing}'"],
                           stdin=subprocess.PIPE)
    archive.finish(jvm, timeout=30)    # closes its stdin, waits, renames
    assert archive.path.read_bytes() == b"archive" and not archive.writing.exists()
    capsys.readouterr()
    again = batch_job.ClassArchive(tmp_path / "cache")
    assert again.options().startswith(f" -XX:SharedArchiveFile={archive.path}")
    assert "first run" not in capsys.readouterr().err
    assert again.writing is None


def test_a_small_inputs_shared_frames_are_checkpointed_a_large_ones_cached(spark):
    """A small job's time went into planning every output over the whole lineage of its shared
    frames (reads, windows, joins): a small input's shared frames are checkpointed, so what is
    built on them is planned over a leaf; a large (or unknown-size) input's are cached."""
    df = spark.range(10).selectExpr("id", "id * 2 AS twice").filter("id > 2")
    small = batch_job.keeper(1000)(df)
    analyzed = small._jdf.queryExecution().analyzed()
    assert analyzed.children().size() == 0 and small.count() == 7       # a leaf, same rows
    for nbytes in (batch_job.SMALL_INPUT, None):
        big = batch_job.keeper(nbytes)(df)
        assert big.is_cached and big._jdf.queryExecution().analyzed().children().size() > 0
        big.unpersist()
