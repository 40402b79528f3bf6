#!/bin/sh
# Build the jarvis sandbox image with no container registry.
#
# Usage: sandbox/build.sh [IMAGE]        (default: jarvis-sandbox:latest)
# Environment: DOCKER_HOST (the engine), JARVIS_SANDBOX_MIRROR (Debian mirror,
# default http://deb.debian.org/debian), JARVIS_SANDBOX_SUITE (default bookworm),
# JARVIS_SANDBOX_CLI (docker or podman, default docker).
#
# Recipe: mmdebstrap's `extract` variant unpacks python3 and dash (for /bin/sh) and
# their dependencies without running maintainer scripts; the extract hook then writes
# what those scripts would have (users, /tmp) and precompiles the standard library so
# every sandboxed start skips it. `docker import` turns the tarball into an image.
# jarvis's own code is NOT in the image: it is bind-mounted read-only from the
# installed package at run time, so host and image never disagree on version.
set -eu

IMAGE="${1:-jarvis-sandbox:latest}"
MIRROR="${JARVIS_SANDBOX_MIRROR:-http://deb.debian.org/debian}"
SUITE="${JARVIS_SANDBOX_SUITE:-bookworm}"
CLI="${JARVIS_SANDBOX_CLI:-docker}"
# Keep these in step with jarvisd/sandbox/_policy.py (SANDBOX_UID/GID).
UID_=10001
GID_=10001

command -v mmdebstrap >/dev/null 2>&1 || {
    echo "mmdebstrap is not installed: apt-get install -y --no-install-recommends mmdebstrap" >&2
    exit 3
}
command -v "$CLI" >/dev/null 2>&1 || { echo "$CLI CLI not found" >&2; exit 3; }

# tmpfs when available: unpacking is mostly small writes.
BASE="${TMPDIR:-/tmp}"
[ -d /dev/shm ] && [ -w /dev/shm ] && BASE=/dev/shm
WORK="$(mktemp -d "$BASE/jarvis-image.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT INT TERM

HOOK="$WORK/hook.sh"
cat >"$HOOK" <<HOOK_EOF
#!/bin/sh
set -eu
root="\$1"
cat >"\$root/etc/passwd" <<'P'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
jarvis:x:$UID_:$GID_:jarvis sandbox:/tmp:/bin/sh
P
cat >"\$root/etc/group" <<'G'
root:x:0:
nogroup:x:65534:
jarvis:x:$GID_:
G
mkdir -p "\$root/tmp" "\$root/opt/jarvis" "\$root/opt/jarvis-in" "\$root/work"
chmod 1777 "\$root/tmp"
# /bin/sh for scripts: dash's maintainer script would have made this link.
[ -e "\$root/bin/sh" ] || ln -s dash "\$root/bin/sh"
# Precompiled stdlib: the read-only root could never cache bytecode at run time.
chroot "\$root" /usr/bin/python3 -m compileall -q -j 0 /usr/lib/python3 /usr/lib/python3.11 >/dev/null 2>&1 || \
    chroot "\$root" /usr/bin/python3 -m compileall -q /usr/lib/python3.11 >/dev/null
HOOK_EOF
chmod +x "$HOOK"

echo "building $IMAGE from $SUITE ($MIRROR)" >&2
TMPDIR="$WORK" mmdebstrap --quiet --variant=extract --include=python3,dash \
    --extract-hook="$HOOK \"\$1\"" \
    "$SUITE" "$WORK/rootfs.tar" "$MIRROR"

"$CLI" import \
    --change 'USER 10001:10001' \
    --change 'WORKDIR /tmp' \
    --change 'ENV PYTHONDONTWRITEBYTECODE=1' \
    --change 'LABEL jarvis.sandbox.image=1' \
    --change 'CMD ["/usr/bin/python3"]' \
    "$WORK/rootfs.tar" "$IMAGE" >/dev/null
echo "built $IMAGE" >&2
