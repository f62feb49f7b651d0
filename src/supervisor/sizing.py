"""How many I/O worker processes to start: ``workerThreads`` bounded by the CPUs the router may use.

In 1.19 ``workerThreads`` is a number of threads sharing one process with the core thread; the
most the router may use, not a demand. Here each worker is a process of its own next to the core
process (and the agent), so starting more workers than the CPUs can serve beside the core makes
them compete with the core for the same CPUs: measured on a 2-CPU box, four workers moved 0.74x
of 1.19's unsettled rate where one moved 0.99x (README, "Performance").

So the router starts ``min(workerThreads, usable CPUs - 1)`` workers, at least one. Usable CPUs
are the ones this process may run on: its affinity mask (``taskset``, systemd's
``CPUAffinity=``), further bounded by a cgroup CPU quota (``CPUQuota=``, a container's
``--cpus``), never the host's count. ``QDROUTERD_WORKER_PROCESSES`` forces the number: an
integer >= 1, or ``workerThreads`` for exactly the configured number (the tests use that to
keep their multi-worker cases multi-worker on any machine).

Pure functions of their inputs (the readers of /proc and /sys are separate and forgiving), so
the rule is tested without touching the machine.
"""

import math
import os
from typing import NamedTuple, Optional

ENV_FORCE = "QDROUTERD_WORKER_PROCESSES"
FORCE_THREADS = "workerThreads"
CGROUP_V2_CPU_MAX = "/sys/fs/cgroup/cpu.max"
CGROUP_V1_QUOTA = "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us"
CGROUP_V1_PERIOD = "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us"


class Sizing(NamedTuple):
    workers: int          # worker processes to start
    threads: int          # the configured workerThreads
    usable_cpus: int      # CPUs this router may run on (affinity and quota)
    reason: str           # "sized", "forced" or "configured"

    def describe(self) -> str:
        """The start-up log line's text."""
        noun = "process" if self.workers == 1 else "processes"
        if self.reason == "sized":
            return (f"{self.workers} I/O worker {noun} for workerThreads {self.threads} on "
                    f"{self.usable_cpus} usable CPUs (one kept for the core; "
                    f"{ENV_FORCE} sets the number)")
        return (f"{self.workers} I/O worker {noun} (workerThreads {self.threads}, "
                f"{self.usable_cpus} usable CPUs, {self.reason} by {ENV_FORCE})")


class SizingError(ValueError):
    """A value of QDROUTERD_WORKER_PROCESSES that is neither an integer >= 1 nor workerThreads."""


def quota_cpus(cpu_max: Optional[str] = None, v1_quota: Optional[str] = None,
               v1_period: Optional[str] = None) -> Optional[int]:
    """CPUs a cgroup quota allows, rounded up (None: no quota). ``cpu_max`` is cgroup v2's
    ``cpu.max`` text (``max 100000`` or ``150000 100000``); the v1 pair is used without it."""
    quota = period = None
    if cpu_max is not None:
        parts = cpu_max.split()
        if len(parts) == 2 and parts[0] != "max":
            quota, period = parts
    elif v1_quota is not None and v1_period is not None:
        quota, period = v1_quota.strip(), v1_period.strip()
    try:
        q, p = int(quota), int(period)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    if q <= 0 or p <= 0:
        return None
    return max(1, math.ceil(q / p))


def usable_cpus(affinity: int, quota: Optional[int]) -> int:
    """The CPUs the router may use: its affinity mask's size, bounded by the quota."""
    return max(1, min(affinity, quota) if quota else affinity)


def size_workers(worker_threads: int, usable: int, force: Optional[str] = None) -> Sizing:
    """The worker processes for ``workerThreads`` on ``usable`` CPUs, or as ``force`` says."""
    threads = max(1, worker_threads)
    if force is not None and force.strip():
        value = force.strip()
        if value == FORCE_THREADS:
            return Sizing(threads, threads, usable, "configured")
        try:
            forced = int(value)
        except ValueError:
            forced = 0
        if forced < 1:
            raise SizingError(f"{ENV_FORCE}={value!r}: expected an integer of at least 1 or "
                              f"{FORCE_THREADS!r}")
        return Sizing(forced, threads, usable, "forced")
    return Sizing(max(1, min(threads, usable - 1)), threads, usable, "sized")


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="ascii") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def machine_usable_cpus() -> int:
    """This process's usable CPUs: affinity mask, then the cgroup quota (v2, else v1)."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = os.cpu_count() or 1
    cpu_max = _read(CGROUP_V2_CPU_MAX)
    quota = (quota_cpus(cpu_max=cpu_max) if cpu_max is not None
             else quota_cpus(v1_quota=_read(CGROUP_V1_QUOTA), v1_period=_read(CGROUP_V1_PERIOD)))
    return usable_cpus(affinity, quota)


def size_for_machine(worker_threads: int) -> Sizing:
    """The sizing on this machine, with the environment's override."""
    return size_workers(worker_threads, machine_usable_cpus(), os.environ.get(ENV_FORCE))
