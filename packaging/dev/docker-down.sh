#!/bin/sh
# Stop the private Docker engine started by docker-up.sh.
# Usage: packaging/dev/docker-down.sh [STATE_DIR]
# Removes jarvis sandbox containers first (dockerd would wait for each), then
# stops dockerd by its pid file, once that pid is seen to be a dockerd. State
# (images) is kept for the next start.
set -eu

. "$(dirname "$0")/docker-state.sh"

STATE="$(state_dir "${1:-}")"
SOCK="$STATE/docker.sock"
PIDFILE="$STATE/dockerd.pid"

if [ ! -e "$STATE" ]; then
    echo "no docker state in $STATE: nothing to stop" >&2
    exit 0
fi
root_only "$STATE"

if $SUDO test -S "$SOCK"; then
    ids="$($SUDO env DOCKER_HOST="unix://$SOCK" docker ps -aq --filter label=jarvis.sandbox=1 2>/dev/null || true)"
    if [ -n "$ids" ]; then
        # shellcheck disable=SC2086
        $SUDO env DOCKER_HOST="unix://$SOCK" docker rm -f $ids >/dev/null 2>&1 || true
    fi
fi
if ! $SUDO test -f "$PIDFILE"; then
    echo "no dockerd pid file in $STATE: nothing to stop" >&2
    exit 0
fi
pid="$($SUDO cat "$PIDFILE")"
case "$pid" in
    '' | *[!0-9]*)
        echo "$PIDFILE does not hold a pid: refused" >&2
        exit 1
        ;;
esac
if kill -0 "$pid" 2>/dev/null || $SUDO kill -0 "$pid" 2>/dev/null; then
    if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != dockerd ]; then
        echo "pid $pid in $PIDFILE is not a dockerd: not signalled" >&2
        exit 1
    fi
    $SUDO kill "$pid"
    i=0
    while $SUDO kill -0 "$pid" 2>/dev/null; do
        i=$((i + 1))
        if [ "$i" -gt 100 ]; then
            echo "dockerd $pid still running after 20 s; sending SIGKILL" >&2
            $SUDO kill -9 "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.2
    done
fi
$SUDO rm -f "$PIDFILE"
echo "dockerd stopped" >&2
