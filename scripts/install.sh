#!/usr/bin/env bash
# Install the router and its dependencies on Debian bookworm (or a box like it).
#   bash scripts/install.sh          system packages + .venv with the router (compiled fast paths)
#   bash scripts/install.sh --test   the same plus the test dependencies (and Chromium for the
#                                    web console's browser tests)
# System packages: proton builds from source and needs the -dev packages, or it silently builds
# without TLS and SASL; libsasl2-modules provides the ANONYMOUS/PLAIN mechanisms at run time.
set -euo pipefail
cd "$(dirname "$0")/.."

extras=""
[ "${1:-}" = "--test" ] && extras="[test]"

packages="gcc g++ pkg-config patch libssl-dev libsasl2-dev libsasl2-modules sasl2-bin python3-dev python3-venv openjdk-17-jre-headless"
# --test: proton-C's headers for the compiled load generator (benchmarks/cloadgen.c), and its
# example broker, which the link-route and auto-link tests compile and run (tests/brokers.py)
[ "${1:-}" = "--test" ] && packages="$packages libqpid-proton11-dev libqpid-proton11-dev-examples"
# the browser tests drive Debian's Chromium (never a browser a tool downloads)
[ -n "$extras" ] && packages="$packages chromium"
missing=""
for p in $packages; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# the web console (console/) is built with Node.js and npm: Debian's, unless a node/npm is there
command -v npm >/dev/null && command -v node >/dev/null || missing="$missing nodejs npm"
if [ -n "$missing" ]; then
    if command -v apt-get >/dev/null; then
        SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
    else
        echo "install.sh: please install:$missing" >&2
        exit 1
    fi
fi

# The web console served by http listeners: its npm dependencies (exact versions from
# console/package-lock.json, reinstalled when the lock file changes) and its build, console/dist/.
(
    cd console
    lock_marker=node_modules/.installed-$(sha256sum package-lock.json | cut -c1-16)
    if [ ! -f "$lock_marker" ]; then
        npm ci --no-audit --no-fund --loglevel=error
        touch "$lock_marker"
    fi
    npm run --silent build
)

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip setuptools wheel
# python-qpid-proton, built from its source distribution with our fixes (scripts/patches/,
# applied in name order): two crashes on SASL frames a client must not send (the router's own
# guard cannot see them inside TLS), and attaches in constant time per link (a session's links
# indexed by name, its handles allocated without a scan). Rebuilt only when a patch changes (a
# marker in the venv names them).
PROTON_VERSION=0.40.0
proton_patches=$(ls scripts/patches/python-qpid-proton-$PROTON_VERSION-*.patch | sort)
proton_marker=.venv/proton-$PROTON_VERSION-$(cat $proton_patches | sha256sum | cut -c1-16)
if [ ! -f "$proton_marker" ]; then
    src=$(mktemp -d)
    .venv/bin/python -m pip download -q --no-deps --no-binary :all: \
        "python-qpid-proton==$PROTON_VERSION" -d "$src"
    tar -xzf "$src"/python_qpid_proton-$PROTON_VERSION.tar.gz -C "$src"
    for proton_patch in $proton_patches; do
        patch -s -d "$src/python_qpid_proton-$PROTON_VERSION" -p1 < "$proton_patch"
    done
    .venv/bin/python -m pip install -q --no-deps --force-reinstall \
        "$src/python_qpid_proton-$PROTON_VERSION"
    rm -rf "$src"
    rm -f .venv/proton-$PROTON_VERSION-*
    touch "$proton_marker"
fi
# python-qpid-proton compiles against OpenSSL and Cyrus SASL found by pkg-config.
.venv/bin/python -m pip install -q -e ".${extras}"
.venv/bin/python - <<'PYEOF'
import proton
assert proton.SSL.present(), "python-qpid-proton was built without TLS: is libssl-dev installed?"
assert proton.SASL.extended(), "python-qpid-proton was built without Cyrus SASL: libsasl2-dev?"
from router_core.core_select import get_core_class
from common import amqpscan_select
print(f"installed: core={get_core_class().__module__} scanner={amqpscan_select.IMPLEMENTATION}")
PYEOF
