#!/bin/sh
# Start a private Docker engine for jarvis's sandbox (development and CI).
#
# Usage: packaging/dev/docker-up.sh [STATE_DIR]
#   STATE_DIR defaults to $JARVIS_DOCKER_STATE or /tmp/jarvis-dockerd.
# Prints the DOCKER_HOST to use on its last line (DOCKER_HOST=unix://...).
#
# - Installs Debian's docker.io, mmdebstrap and bubblewrap when missing, with a
#   policy-rc.d that keeps the package from starting its own daemon.
# - Starts dockerd in its own session with private state, no bridge, no iptables,
#   no ip forwarding: sandboxes only ever use `--network none`.
# - Idempotent: a daemon already answering on STATE_DIR/docker.sock is reused.
set -eu

STATE="${1:-${JARVIS_DOCKER_STATE:-/tmp/jarvis-dockerd}}"
mkdir -p "$STATE"
STATE="$(cd "$STATE" && pwd)"
SOCK="$STATE/docker.sock"
HOST="unix://$SOCK"

SUDO=""
if [ "$(id -u)" != "0" ]; then
    SUDO="sudo"
fi

need=""
command -v dockerd >/dev/null 2>&1 || need="$need docker.io"
command -v mmdebstrap >/dev/null 2>&1 || need="$need mmdebstrap"
command -v bwrap >/dev/null 2>&1 || need="$need bubblewrap"
if [ -n "$need" ]; then
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        # exit 101: "action forbidden", so the package starts no daemon of its own.
        printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
        $SUDO chmod 755 /usr/sbin/policy-rc.d
    fi
    echo "installing:$need" >&2
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    # shellcheck disable=SC2086
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends $need >&2
fi

answers() {
    DOCKER_HOST="$HOST" docker version --format '{{.Server.Version}}' >/dev/null 2>&1
}

if [ -S "$SOCK" ] && answers; then
    echo "reusing the engine already running on $SOCK" >&2
    echo "DOCKER_HOST=$HOST"
    exit 0
fi

# A stale pid file or socket from a crashed daemon would stop a new one.
if [ -f "$STATE/dockerd.pid" ]; then
    old="$(cat "$STATE/dockerd.pid" 2>/dev/null || true)"
    if [ -n "$old" ] && kill -0 "$old" 2>/dev/null; then
        echo "dockerd pid $old exists but does not answer; stop it with docker-down.sh" >&2
        exit 1
    fi
    rm -f "$STATE/dockerd.pid"
fi
rm -f "$SOCK"

mkdir -p "$STATE/root" "$STATE/exec"
$SUDO setsid dockerd \
    --data-root "$STATE/root" \
    --exec-root "$STATE/exec" \
    --pidfile "$STATE/dockerd.pid" \
    -H "$HOST" \
    --bridge=none --iptables=false --ip-forward=false --ip-masq=false \
    --shutdown-timeout=2 \
    >"$STATE/dockerd.log" 2>&1 </dev/null &

i=0
until answers; do
    i=$((i + 1))
    if [ "$i" -gt 150 ]; then
        echo "dockerd did not answer within 30 s; last lines of $STATE/dockerd.log:" >&2
        tail -n 20 "$STATE/dockerd.log" >&2 || true
        exit 1
    fi
    sleep 0.2
done
if [ -n "$SUDO" ]; then
    $SUDO chmod 666 "$SOCK"
fi
echo "dockerd running (state in $STATE)" >&2
echo "DOCKER_HOST=$HOST"
