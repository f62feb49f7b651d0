"""Build (once, cached) and locate ``cloadgen``, the compiled load generator (``cloadgen.c``).

``cloadgen`` takes the same options as ``loadgen.py`` for a sender or a receiver and writes the
same ``loadgen/1`` JSON line (plus ``lat_p999_us`` and ``"client": "cloadgen"``); it drives proton-C's
proactor directly, so one pair moves about a million 100-byte messages a second without a router
on this kind of machine (``python benchmarks/cloadgen.py --direct`` shows it), several times what a
router does: the router, not the client, is measured.

Needs gcc and proton-C's headers (Debian: ``libqpid-proton11-dev``; ``scripts/install.sh --test``
installs it). The binary goes to ``benchmarks/results/bin/cloadgen-<hash of the source>``.

    python benchmarks/cloadgen.py            # build; print the binary's path
    python benchmarks/cloadgen.py --direct   # build; one direct pair, unsettled then presettled
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "cloadgen.c"
BIN_DIR = HERE / "results" / "bin"


class BuildError(RuntimeError):
    pass


def binary_path() -> Path:
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    return BIN_DIR / f"cloadgen-{digest}"


def build() -> Path:
    """The path of a binary built from the current source (built now if missing)."""
    target = binary_path()
    if target.exists():
        return target
    cc = shutil.which("gcc") or shutil.which("cc")
    if not cc:
        raise BuildError("no C compiler (apt-get install gcc)")
    try:
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "libqpid-proton"],
                               capture_output=True, text=True, check=True, timeout=30).stdout.split()
    except (OSError, subprocess.SubprocessError):
        raise BuildError("proton-C headers not found (apt-get install libqpid-proton11-dev)")
    BIN_DIR.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    proc = subprocess.run([cc, "-O2", "-Wall", "-o", str(tmp), str(SOURCE), *flags],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"cloadgen did not compile:\n{proc.stderr}")
    tmp.replace(target)     # atomic: concurrent builders never see half a binary
    return target


def direct_pair(count: int = 200_000, presettled: bool = False, credit: int = 1000) -> dict:
    """One receiver listening and one sender connecting to it (no router); the receiver's line."""
    exe = str(build())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="cloadgen-") as tmp:
        out, ready = Path(tmp) / "out.jsonl", Path(tmp) / "ready"
        url = f"127.0.0.1:{port}"
        rcv = subprocess.Popen([exe, "receiver", "--listen", "--url", url, "--count", str(count),
                                "--credit", str(credit), "--out", str(out), "--ready-file",
                                str(ready), "--timeout", "60"], stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while not ready.exists() and rcv.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            snd = [exe, "sender", "--url", url, "--count", str(count), "--out", str(out),
                   "--timeout", "60"] + (["--presettled"] if presettled else [])
            subprocess.run(snd, stderr=subprocess.DEVNULL, timeout=90)
            rcv.wait(90)
        finally:
            if rcv.poll() is None:
                rcv.kill()
                rcv.wait(5)
        lines = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return next(r for r in lines if r["role"] == "receiver")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description="Build (once, cached) the compiled load generator and print its path.",
        epilog="The binary itself takes loadgen.py's sender/receiver options.")
    parser.add_argument("--direct", action="store_true",
                        help="then run one direct pair (no router), unsettled and pre-settled")
    args = parser.parse_args(argv)
    try:
        exe = build()
    except BuildError as e:
        print(f"cloadgen: {e}", file=sys.stderr)
        return 1
    print(exe)
    if args.direct:
        for presettled in (False, True):
            r = direct_pair(presettled=presettled)
            print(f"direct {'presettled' if presettled else 'unsettled'}: {r['count']} msgs, "
                  f"{r['msgs_per_s']} msg/s, receiver {r['cpu_us_per_msg']} us/msg, latency us "
                  f"p50 {r['lat_p50_us']} p99 {r['lat_p99_us']}, error {r['error']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
