#!/bin/sh
# Build the jarvis sandbox image with no container registry.
#
# Usage: sandbox/build.sh [IMAGE]     (default: config sandbox.image, jarvis-sandbox:latest)
# Same as `jarvis sandbox build`; the recipe lives in jarvisd/sandbox/_image.py:
#   mmdebstrap --variant=extract --include=python3,dash,bash,coreutils,libstdc++6,libgcc-s1,zlib1g,\
#     python3-pip,python3-venv,git,ca-certificates bookworm rootfs.tar
#     with an --extract-hook writing /etc/passwd, /etc/group, /tmp (1777), the CA bundle,
#     dropping docs and translations and precompiling Python, then the engine imports it.
# Environment: DOCKER_HOST (the engine), JARVIS_SANDBOX_MIRROR (Debian mirror),
# JARVIS_SANDBOX_SUITE (default bookworm), PYTHON (interpreter with jarvis installed).
set -eu
here="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-}"
if [ -z "$PYTHON" ]; then
    if [ -x "$here/.venv/bin/python" ]; then PYTHON="$here/.venv/bin/python"; else PYTHON=python3; fi
fi
exec "$PYTHON" -m jarvisd.sandbox._image "$@"
