#!/bin/sh
# Stop the private Docker engine started by docker-up.sh.
# Usage: packaging/dev/docker-down.sh [STATE_DIR]
# Removes jarvis sandbox containers first (dockerd would wait for each), then
# stops dockerd by its pid file. State (images) is kept for the next start.
set -eu

STATE="${1:-${JARVIS_DOCKER_STATE:-/tmp/jarvis-dockerd}}"
SOCK="$STATE/docker.sock"
PIDFILE="$STATE/dockerd.pid"

if [ -S "$SOCK" ]; then
    ids="$(DOCKER_HOST="unix://$SOCK" docker ps -aq --filter label=jarvis.sandbox=1 2>/dev/null || true)"
    if [ -n "$ids" ]; then
        # shellcheck disable=SC2086
        DOCKER_HOST="unix://$SOCK" docker rm -f $ids >/dev/null 2>&1 || true
    fi
fi
if [ ! -f "$PIDFILE" ]; then
    echo "no dockerd pid file in $STATE: nothing to stop" >&2
    exit 0
fi
pid="$(cat "$PIDFILE")"
if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    i=0
    while kill -0 "$pid" 2>/dev/null; do
        i=$((i + 1))
        if [ "$i" -gt 100 ]; then
            echo "dockerd $pid still running after 20 s; sending SIGKILL" >&2
            kill -9 "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.2
    done
fi
rm -f "$PIDFILE"
echo "dockerd stopped" >&2
