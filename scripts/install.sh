#!/usr/bin/env bash
# Install the router and its dependencies on Debian bookworm (or a box like it).
#   bash scripts/install.sh          system packages + .venv with the router (compiled fast paths)
#   bash scripts/install.sh --test   the same plus the test dependencies
# System packages: proton builds from source and needs the -dev packages, or it silently builds
# without TLS and SASL; libsasl2-modules provides the ANONYMOUS/PLAIN mechanisms at run time.
set -euo pipefail
cd "$(dirname "$0")/.."

extras=""
[ "${1:-}" = "--test" ] && extras="[test]"

packages="gcc g++ pkg-config libssl-dev libsasl2-dev libsasl2-modules sasl2-bin python3-dev python3-venv openjdk-17-jre-headless"
missing=""
for p in $packages; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
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

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip setuptools wheel
# python-qpid-proton compiles against OpenSSL and Cyrus SASL found by pkg-config.
.venv/bin/python -m pip install -q -e ".${extras}"
.venv/bin/python - <<'PYEOF'
import proton
assert proton.SSL.present(), "python-qpid-proton was built without TLS: is libssl-dev installed?"
assert proton.SASL.extended(), "python-qpid-proton was built without Cyrus SASL: libsasl2-dev?"
from router_core.select import get_core_class
from router_io import amqpscan
print(f"installed: core={get_core_class().__module__} scanner={amqpscan.IMPLEMENTATION}")
PYEOF
