"""Spark schemas of the pipelines' inputs, in one place.

Owns: ``METRICS_SCHEMA`` (the router's "router-metrics/1" JSON lines, see
``common.metrics_schema``), ``LOADGEN_SCHEMA`` (one "loadgen/1" result line per client, see
``benchmarks/loadgen.py``) and ``LOADGEN_SECOND_SCHEMA`` (one row per client and second, after
``transforms.loadgen_seconds``).
The metrics schema is built from the key lists in ``common.metrics_schema`` so the two cannot
drift.

Every field is nullable: a record of one kind has nulls in the other kinds' columns, and byte
counters are absent until the core counts bytes. Must not import the job scripts.
"""
from __future__ import annotations

from pyspark.sql.types import (
    ArrayType, BooleanType, DoubleType, LongType, StringType, StructField, StructType)

from common import metrics_schema as m

METRICS_SCHEMA_TAG = m.SCHEMA
LOADGEN_SCHEMA_TAG = "loadgen/1"

_STRING_ATTRS = {"linkDir", "owningAddr", "linkName", "distribution", "container", "host",
                 "role", "dir"}


def _metrics_fields() -> list[StructField]:
    fields = [StructField("schema", StringType()), StructField("ts", DoubleType()),
              StructField("router_id", StringType()), StructField("kind", StringType()),
              StructField("key", StringType()), StructField("address", StringType()),
              StructField("interval_s", DoubleType()), StructField("final", BooleanType()),
              StructField("seq", LongType()), StructField("gone_ts", DoubleType()),
              StructField("gone_mono", DoubleType())]
    seen = {f.name for f in fields}
    for counters, gauges, attrs, byte_counters in m.KINDS.values():
        for name in counters + byte_counters + gauges + attrs:
            if name not in seen:
                seen.add(name)
                fields.append(StructField(name, StringType() if name in _STRING_ATTRS
                                          else LongType()))
        for name in counters + byte_counters:
            delta = m.DELTA_PREFIX + name
            if delta not in seen:
                seen.add(delta)
                fields.append(StructField(delta, LongType()))
    return fields


METRICS_SCHEMA = StructType(_metrics_fields())

PER_SECOND_SCHEMA = StructType([
    StructField("t", LongType()), StructField("sent", LongType()),
    StructField("settled", LongType()), StructField("received", LongType()),
    StructField("p50_us", LongType()), StructField("p99_us", LongType())])

# a receiver's --record-trace: messages per path through the routers (x-opt-qd.trace)
PATH_SCHEMA = StructType([
    StructField("path", ArrayType(StringType())), StructField("count", LongType())])

LOADGEN_SCHEMA = StructType([
    StructField("schema", StringType()), StructField("run_id", StringType()),
    StructField("role", StringType()), StructField("pid", LongType()),
    StructField("url", StringType()), StructField("address", StringType()),
    StructField("listen", BooleanType()), StructField("count", LongType()),
    StructField("target_count", LongType()), StructField("body_size", LongType()),
    StructField("presettled", BooleanType()), StructField("credit", LongType()),
    StructField("window", LongType()), StructField("start_ts", DoubleType()),
    StructField("end_ts", DoubleType()), StructField("elapsed_s", DoubleType()),
    StructField("msgs_per_s", DoubleType()), StructField("cpu_user_s", DoubleType()),
    StructField("cpu_sys_s", DoubleType()), StructField("cpu_us_per_msg", DoubleType()),
    StructField("lat_p50_us", LongType()), StructField("lat_p90_us", LongType()),
    StructField("lat_p99_us", LongType()), StructField("lat_max_us", LongType()),
    StructField("lat_missing", LongType()), StructField("accepted", LongType()),
    StructField("released", LongType()), StructField("rejected", LongType()),
    StructField("modified", LongType()), StructField("settled", LongType()),
    StructField("error", StringType()),
    StructField("per_second", ArrayType(PER_SECOND_SCHEMA)),
    StructField("paths", ArrayType(PATH_SCHEMA))])

LOADGEN_SECOND_SCHEMA = StructType([
    StructField("run_id", StringType()), StructField("role", StringType()),
    StructField("pid", LongType()), StructField("address", StringType()),
    StructField("body_size", LongType())] + list(PER_SECOND_SCHEMA.fields))
