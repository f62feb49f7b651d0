#!/usr/bin/env bash
# Install the router as a systemd service (run as root from a checkout of this repository).
#
#   bash scripts/install-service.sh [--prefix /opt/qdrouterd] [--no-pip] [--dest-root DIR]
#
# What it does (idempotent; an existing configuration file is never overwritten):
#   1. creates the system user and group `qdrouterd` (no login, no home);
#   2. creates a virtualenv in PREFIX (default /opt/qdrouterd) and pip-installs this checkout into
#      it (skipped with --no-pip, e.g. when PREFIX/bin/qdrouterd is already there), and links
#      /usr/local/bin/{qdrouterd,qdstat,qdmanage} to it. The virtualenv must live outside /home
#      and /root: the unit's ProtectHome=yes hides those from the service;
#   3. installs the documentation (README.md and docs/) in PREFIX/share/doc/qdrouter-py, where
#      the unit's Documentation= and the tools' --help point;
#   4. installs conf/qdrouterd.conf as /etc/qpid-dispatch/qdrouterd.conf if that file is absent;
#   5. installs conf/qdrouterd.service as /etc/systemd/system/qdrouterd.service (its
#      Documentation= paths follow PREFIX);
#   6. runs `systemctl daemon-reload` when systemd is the running init.
# Then: systemctl enable --now qdrouterd
#
# --dest-root DIR installs the files under DIR instead of / (packaging, tests); it implies
# --no-pip and skips the user and systemctl steps.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix=/opt/qdrouterd
pip=1
root=""
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix="$2"; shift 2 ;;
        --no-pip) pip=0; shift ;;
        --dest-root) root="${2%/}"; pip=0; shift 2 ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) echo "install-service.sh: unknown option $1" >&2; exit 2 ;;
    esac
done

if [ -z "$root" ] && [ "$(id -u)" -ne 0 ]; then
    echo "install-service.sh: run as root (or with sudo)" >&2
    exit 1
fi
case "$prefix" in
    /home/*|/root/*|/root) echo "install-service.sh: --prefix must not be under /home or /root" \
                                "(ProtectHome=yes hides them from the service)" >&2; exit 1 ;;
esac

# 1. user
if [ -z "$root" ] && ! getent passwd qdrouterd >/dev/null; then
    nologin="$(command -v nologin || echo /usr/sbin/nologin)"
    useradd --system --user-group --no-create-home --home-dir /nonexistent \
            --shell "$nologin" --comment "qdrouterd AMQP router" qdrouterd
    echo "created system user qdrouterd"
fi

# 2. software
if [ "$pip" = 1 ]; then
    python="${PYTHON:-python3}"
    [ -x "$prefix/bin/python" ] || "$python" -m venv "$prefix"
    "$prefix/bin/pip" install --quiet --upgrade pip
    "$prefix/bin/pip" install --quiet "$here"
    # the web console (built by scripts/install.sh), where the router looks for it by default
    if [ -f "$here/console/dist/index.html" ]; then
        rm -rf "$prefix/share/qdrouter-py/console"
        install -d "$prefix/share/qdrouter-py"
        cp -r "$here/console/dist" "$prefix/share/qdrouter-py/console"
    fi
fi
install -d "$root/usr/local/bin"
for tool in qdrouterd qdstat qdmanage; do
    ln -sfn "$prefix/bin/$tool" "$root/usr/local/bin/$tool"
done

# 3. documentation
docdir="$root$prefix/share/doc/qdrouter-py"
rm -rf "$docdir"
install -d "$docdir"
install -m 0644 "$here/README.md" "$docdir/README.md"
install -m 0644 "$here"/docs/*.md "$here"/docs/*.png "$docdir/"
echo "installed the documentation in $prefix/share/doc/qdrouter-py"

# 4. configuration (never overwritten)
install -d -m 0755 "$root/etc/qpid-dispatch"
if [ ! -e "$root/etc/qpid-dispatch/qdrouterd.conf" ]; then
    install -m 0644 "$here/conf/qdrouterd.conf" "$root/etc/qpid-dispatch/qdrouterd.conf"
    echo "installed /etc/qpid-dispatch/qdrouterd.conf"
    echo "WARNING: this configuration accepts AMQP clients on 0.0.0.0:5672 without" \
         "authentication; see $prefix/share/doc/qdrouter-py/security.md before you start it" >&2
else
    echo "kept the existing /etc/qpid-dispatch/qdrouterd.conf"
fi

# 5. unit
install -d "$root/etc/systemd/system"
sed "s|file:///opt/qdrouterd/|file://$prefix/|" "$here/conf/qdrouterd.service" \
    > "$root/etc/systemd/system/qdrouterd.service"
chmod 0644 "$root/etc/systemd/system/qdrouterd.service"
echo "installed /etc/systemd/system/qdrouterd.service"

# 6. systemd
if [ -z "$root" ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
    systemctl daemon-reload
    echo "systemd reloaded; start with: systemctl enable --now qdrouterd"
else
    echo "systemd is not running here; the unit takes effect at the next boot or daemon-reload"
fi
