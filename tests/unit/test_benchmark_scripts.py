"""Every script under benchmarks/ starts: its ``--help`` exits 0.

The scripts share option builders (run_router_bench.add_load_options); an option added there
once made bench_network.py stop at start (two ``--rate`` options) without any test noticing.
Only ``--help`` is run, plus the scripts' own helpers imported: no router, no client, nothing
built (the command-prefix test starts a one-line Python probe in a router's place; the
hops-floor test runs bench_zmq_hops.py for half a second)."""
from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py"))


def bench_module(name: str):
    """A script under benchmarks/ as a module (its imports of its neighbours resolve)."""
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))


def test_the_scripts_are_found():
    assert "bench_network.py" in SCRIPTS and "side_by_side.py" in SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_exits_zero(script):
    done = subprocess.run([sys.executable, str(BENCH / script), "--help"], cwd=BENCH,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage" in done.stdout.lower()


def test_side_by_side_cases_choose_their_clients_and_rates():
    """Each case names what it runs: the paced cases their rate, lat-10k-py the Python clients
    (loadgen.py) and every other case the compiled cloadgen."""
    sbs = bench_module("side_by_side")
    specs = {name: sbs.Spec(name, half_rate=45_000.0) for name in sbs.CASES}
    assert {n: s.client for n, s in specs.items() if s.client != "c"} == {"lat-10k-py": "py"}
    assert {n: s.rate for n, s in specs.items() if s.rate} == {
        "lat-10k": 10_000.0, "lat-10k-py": 10_000.0, "lat-half": 45_000.0}
    assert (specs["3r-unsettled"].routers, specs["1r-presettled-4p"].pairs) == (3, 4)
    assert specs["1r-presettled-4p"].presettled and not specs["lat-10k-py"].presettled
    args = sbs.build_parser().parse_args(["--qdrouterd-1x", "/nonexistent", "--paced-seconds", "2"])
    load = sbs.load_args(args, specs["lat-10k-py"])
    assert (load.client, load.rate, load.count) == ("py", 10_000.0, 20_000)


def test_link_capacity_reaches_the_generated_configurations(tmp_path):
    """--link-capacity (side_by_side) sets the clients' listener of both routers' generated
    configurations, single router and chains alike; unset, neither names it."""
    bn, rb = bench_module("bench_network"), bench_module("run_router_bench")
    rb.write_conf(tmp_path / "a.conf", 5672, 4, link_capacity=1000)
    rb.write_conf(tmp_path / "b.conf", 5672, 4)
    assert "linkCapacity: 1000" in (tmp_path / "a.conf").read_text()
    assert "linkCapacity" not in (tmp_path / "b.conf").read_text()
    text = bn.interior_conf("Router.R1", 5672, 5673, 4, [(5674, 1, "R2")], link_capacity=1000)
    normal, inter_router = text.split("listener {")[1:3]
    assert "linkCapacity: 1000" in normal and "linkCapacity" not in inter_router
    assert "linkCapacity" not in bn.interior_conf("Router.R1", 5672, 5673, 4, [])


def test_scaling_model_is_the_lesser_of_cpu_and_the_serial_core(capsys):
    """bench_scaling.py model: N cores carry N*1e6/R msg/s until the serial part (S µs a
    message) saturates at 1e6/S, from N = R/S cores on."""
    bench_scaling = bench_module("bench_scaling")
    args = bench_scaling.build_parser().parse_args(
        ["model", "--router-us", "8", "--serial-us", "2", "--cores", "1,2,3,4,8"])
    rows = bench_scaling.cmd_model(args)
    assert [(r["cores"], r["msgs_per_s"], r["core_bound"]) for r in rows] == [
        (1, 125_000, False), (2, 250_000, False), (3, 375_000, False), (4, 500_000, True),
        (8, 500_000, True)]


def test_side_by_side_pairs_each_repeats_two_runs():
    """The paired ratios divide each repeat's run of ours by the same repeat's 1.x run; a
    repeat missing a figure on either side is left out, not paired with another repeat."""
    sbs = bench_module("side_by_side")
    ours = [{"repeat": 0, "msgs_per_s": 90.0}, {"repeat": 1, "msgs_per_s": 120.0},
            {"repeat": 2, "msgs_per_s": None}, {"repeat": 3, "msgs_per_s": 50.0}]
    other = [{"repeat": 1, "msgs_per_s": 100.0}, {"repeat": 0, "msgs_per_s": 100.0},
             {"repeat": 2, "msgs_per_s": 100.0}]
    assert sbs.paired_ratios(ours, other, "msgs_per_s") == [0.9, 1.2]


def test_the_floor_is_taken_from_ours_repeat_by_repeat():
    """'-hops' is each repeat's latency of ours minus the hops measured in that same repeat; a
    repeat whose floor run failed (no row, or no figure) gives no difference."""
    sbs = bench_module("side_by_side")
    ours = [{"repeat": 0, "lat_p50_us": 300.0, "lat_p99_us": 900.0},
            {"repeat": 1, "lat_p50_us": 350.0, "lat_p99_us": 700.0},
            {"repeat": 2, "lat_p50_us": 400.0, "lat_p99_us": 800.0}]
    floor = [{"repeat": 1, "lat_p50_us": 150.0, "lat_p99_us": 600.0},
             {"repeat": 0, "lat_p50_us": 120.0, "lat_p99_us": None}]
    assert sbs.past_floor(ours, floor) == [
        {"repeat": 0, "lat_p50_us": 180.0}, {"repeat": 1, "lat_p50_us": 200.0,
                                             "lat_p99_us": 100.0}]


def test_the_hops_floor_is_measured_under_our_prefix():
    """The floor beside a paced case is a real run of bench_zmq_hops.py (three processes, two
    ipc hops) at the case's rate; a prefix that cannot start it is an error of that row, not a
    silent missing figure."""
    sbs = bench_module("side_by_side")
    spec = sbs.Spec("lat-10k", 0.0)
    assert spec.floor and not sbs.Spec("lat-half", 1000.0).floor
    args = sbs.build_parser().parse_args(["--qdrouterd-1x", "/nowhere", "--paced-seconds",
                                          "0.5"])
    row = sbs.hop_floor(spec, args, 3)
    assert row["errors"] == [] and row["router"] == "floor" and row["repeat"] == 3
    assert row["sent"] == 5000 and row["received"] > 0  # a busy box may drop over the HWM
    assert 0 < row["lat_p50_us"] <= row["lat_p99_us"]
    args.ours_prefix = "false"
    failed = sbs.hop_floor(spec, args, 0)
    assert failed["errors"] and "lat_p50_us" not in failed


def test_a_command_prefix_starts_the_router_under_it(tmp_path):
    """A command prefix (what side_by_side's --ours-prefix passes for our routers) reaches the
    router's command line: started under ``taskset -c 0`` the process runs on CPU 0 only."""
    if not shutil.which("taskset"):
        pytest.skip("no taskset (util-linux) on this machine")
    if len(os.sched_getaffinity(0)) < 2 or 0 not in os.sched_getaffinity(0):
        pytest.skip("needs CPU 0 and another CPU, so that the prefix changes something")
    rb = bench_module("run_router_bench")
    probe = f"{sys.executable} -c 'import os; print(sorted(os.sched_getaffinity(0)))'"
    router = rb.Router(tmp_path, 5672, 1, probe, {}, name="probe", prefix=["taskset", "-c", "0"])
    try:
        assert router.proc.wait(timeout=30) == 0
    finally:
        router.log.close()
    assert router.log_path.read_text().strip() == "[0]"


def test_dropped_presettled_messages_are_a_figure_not_a_failure(tmp_path, capsys):
    """A pre-settled run where the router dropped messages (a receiver stopped idle short of its
    count) reports them as ``lost`` and the script exits 0; the same stop in an unsettled run is
    an error (an unsettled delivery must never go missing)."""
    rb = bench_module("run_router_bench")
    clients = [
        {"role": "sender", "address": "bench/x/0", "count": 60000, "error": None},
        {"role": "receiver", "address": "bench/x/0", "count": 40080,
         "error": "idle for 2.0s after 40080 messages"},
    ]
    assert rb.client_errors(clients, presettled=True, shared=False) == []
    assert rb.client_errors(clients, presettled=False, shared=False) == [
        "receiver bench/x/0: idle for 2.0s after 40080 messages"]
    broken = clients + [{"role": "sender", "address": "bench/x/1", "count": 3,
                         "error": "timeout after 120s"}]
    assert rb.client_errors(broken, presettled=True, shared=False) == [
        "sender bench/x/1: timeout after 120s"]
    args = rb.build_parser().parse_args(["--both", "--direct"])
    for c in clients:
        c.update(start_ts=1.0, end_ts=2.0, cpu_user_s=0.1, cpu_sys_s=0.0, lat_p50_us=None,
                 lat_p99_us=None)
    row = rb.summarize(args, clients, "r", "presettled", "default", None, None, {}, None,
                       rb.client_errors(clients, True, False), 0.0)
    assert (row["sent"], row["received"], row["lost"], row["errors"]) == (60000, 40080, 19920, [])
    rb.print_table([row])
    assert "dropped 19920 of 60000 pre-settled messages" in capsys.readouterr().out
    cmd = rb.client_cmd("receiver", "127.0.0.1:1", "a", args, tmp_path / "o", tmp_path / "r", "r",
                        presettled=True)
    assert cmd[cmd.index("--idle-timeout") + 1] == str(rb.PRESETTLED_IDLE_S)
