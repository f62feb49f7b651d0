"""Worker processes sized to the CPUs the router may use (supervisor/sizing.py)."""
import pytest

from supervisor.sizing import (
    ENV_FORCE, SizingError, Sizing, quota_cpus, size_workers, usable_cpus)


@pytest.mark.parametrize("threads, usable, workers", [
    (4, 2, 1),    # 1.19's default workerThreads on a 2-CPU box: one worker beside the core
    (4, 1, 1),    # never fewer than one
    (1, 16, 1),   # workerThreads is the most the router may use
    (4, 8, 4),
    (16, 8, 7),   # one CPU kept for the core
    (0, 4, 1),
])
def test_sized_default(threads, usable, workers):
    sizing = size_workers(threads, usable)
    assert sizing == Sizing(workers, max(1, threads), usable, "sized")
    assert f"{workers} I/O worker" in sizing.describe()
    assert f"on {usable} usable CPUs" in sizing.describe()


def test_forced_number_and_configured_number():
    assert size_workers(4, 2, "3").workers == 3
    assert size_workers(4, 2, " 3 ").reason == "forced"
    assert size_workers(4, 2, "workerThreads") == Sizing(4, 4, 2, "configured")
    assert size_workers(4, 2, "") == size_workers(4, 2)  # empty: not set


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5"])
def test_bad_force_value_is_refused(value):
    with pytest.raises(SizingError, match=ENV_FORCE):
        size_workers(4, 2, value)


@pytest.mark.parametrize("cpu_max, expected", [
    ("max 100000\n", None), ("150000 100000\n", 2), ("100000 100000", 1), ("50000 100000", 1),
    ("400000 100000", 4), ("garbage", None), ("0 100000", None)])
def test_cgroup_v2_quota(cpu_max, expected):
    assert quota_cpus(cpu_max=cpu_max) == expected


def test_cgroup_v1_quota():
    assert quota_cpus(v1_quota="-1\n", v1_period="100000\n") is None
    assert quota_cpus(v1_quota="250000\n", v1_period="100000\n") == 3
    assert quota_cpus(v1_quota=None, v1_period=None) is None


def test_usable_cpus_takes_the_smaller_of_affinity_and_quota():
    assert usable_cpus(8, 2) == 2
    assert usable_cpus(2, 8) == 2
    assert usable_cpus(4, None) == 4
