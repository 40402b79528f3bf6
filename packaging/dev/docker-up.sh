#!/bin/sh
# Start a private Docker engine for jarvis's sandbox (development and CI).
#
# Usage: packaging/dev/docker-up.sh [STATE_DIR]
#   STATE_DIR defaults to $JARVIS_DOCKER_STATE or /var/lib/jarvis-dockerd.
# Prints the DOCKER_HOST to use on its last line (DOCKER_HOST=unix://...).
#
# - Installs Debian's docker.io, mmdebstrap and bubblewrap when missing, with a
#   policy-rc.d that keeps the package from starting its own daemon.
# - Starts dockerd in its own session with private state, no bridge, no iptables,
#   no ip forwarding: sandboxes only ever use `--network none`.
# - The state directory is root's alone (see docker-state.sh): created 0700 when
#   missing; an existing one that is a symlink, or that someone else owns or can
#   write, or that lies under such a directory, is refused.
# - The socket is 0660: group root when run as root; run by another user (through
#   sudo), group jarvis-docker ($JARVIS_DOCKER_GROUP), created if missing, with that
#   user added. Its members can run containers as root: it is root-equivalent, like
#   Docker's own docker group.
# - Idempotent: a daemon already answering on STATE_DIR/docker.sock is reused.
set -eu

. "$(dirname "$0")/docker-state.sh"
# dockerd lives in /usr/sbin, which a user's PATH may lack.
PATH="$PATH:/usr/sbin:/sbin"

STATE="$(state_dir "${1:-}")"
SOCK="$STATE/docker.sock"
HOST="unix://$SOCK"
GROUP=root
if [ -n "$SUDO" ]; then
    GROUP="${JARVIS_DOCKER_GROUP:-jarvis-docker}"
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

if [ -n "$SUDO" ]; then
    if ! getent group "$GROUP" >/dev/null; then
        $SUDO groupadd --system "$GROUP"
    fi
    me="$(id -un)"
    if ! id -nG "$me" | tr ' ' '\n' | grep -qx "$GROUP"; then
        $SUDO usermod -a -G "$GROUP" "$me"
        echo "added $me to the group $GROUP (root-equivalent: it can run the engine)" >&2
    fi
fi

# The state directory: checked, never followed through a link, created root-only.
if [ ! -e "$STATE" ] && [ ! -L "$STATE" ]; then
    parent="$(dirname "$STATE")"
    existing="$parent"
    while [ ! -e "$existing" ] && [ ! -L "$existing" ]; do
        existing="$(dirname "$existing")"
    done
    root_only "$existing"
    $SUDO mkdir -p "$parent"
    root_only "$parent"
    $SUDO mkdir -m 0700 "$STATE"
    if [ -n "$SUDO" ]; then
        # The group may pass through to the socket, nothing more.
        $SUDO chgrp "$GROUP" "$STATE"
        $SUDO chmod 0710 "$STATE"
    fi
fi
root_only "$STATE"

answers() {
    $SUDO env DOCKER_HOST="$HOST" docker version --format '{{.Server.Version}}' >/dev/null 2>&1
}

if $SUDO test -S "$SOCK" && answers; then
    echo "reusing the engine already running on $SOCK" >&2
    echo "DOCKER_HOST=$HOST"
    exit 0
fi

# A stale pid file or socket from a crashed daemon would stop a new one.
if $SUDO test -f "$STATE/dockerd.pid"; then
    old="$($SUDO cat "$STATE/dockerd.pid" 2>/dev/null || true)"
    if [ -n "$old" ] && kill -0 "$old" 2>/dev/null; then
        echo "dockerd pid $old exists but does not answer; stop it with docker-down.sh" >&2
        exit 1
    fi
    $SUDO rm -f "$STATE/dockerd.pid"
fi
$SUDO rm -f "$SOCK"

$SUDO mkdir -p "$STATE/root" "$STATE/exec"
# The log is opened by root, inside the root-only directory.
# shellcheck disable=SC2016
$SUDO sh -c 'log="$1"; shift; exec setsid "$@" >"$log" 2>&1 </dev/null' sh \
    "$STATE/dockerd.log" dockerd \
    --data-root "$STATE/root" \
    --exec-root "$STATE/exec" \
    --pidfile "$STATE/dockerd.pid" \
    -H "$HOST" \
    --group "$GROUP" \
    --bridge=none --iptables=false --ip-forward=false --ip-masq=false \
    --shutdown-timeout=2 &

i=0
until answers; do
    i=$((i + 1))
    if [ "$i" -gt 150 ]; then
        echo "dockerd did not answer within 30 s; last lines of $STATE/dockerd.log:" >&2
        $SUDO tail -n 20 "$STATE/dockerd.log" >&2 || true
        exit 1
    fi
    sleep 0.2
done
echo "dockerd running (state in $STATE, socket group $GROUP)" >&2
if [ -n "$SUDO" ] && ! id -G | tr ' ' '\n' | grep -qx "$(getent group "$GROUP" | cut -d: -f3)"; then
    echo "this shell is not yet in $GROUP: log in again, or run commands under" \
        "\`sg $GROUP -c '...'\`" >&2
fi
echo "DOCKER_HOST=$HOST"
