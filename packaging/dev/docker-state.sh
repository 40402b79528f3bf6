# Shared by docker-up.sh and docker-down.sh (sourced, POSIX sh): where the private
# engine keeps its state, and the checks that keep anyone but root out of it.
#
# The state directory holds dockerd's socket, pid file, log and images, and dockerd runs
# as root: a directory another user could create, replace or fill with symlinks would
# let them redirect root's writes or hand out the engine. So it must be a real
# directory (no symlink), owned by root and writable by no one else, and so must every
# directory above it (a sticky one, like /tmp, counts as safe: only root can rename
# root's entries in it). It defaults to /var/lib/jarvis-dockerd, which only root can
# create.

JARVIS_DOCKER_STATE_DEFAULT=/var/lib/jarvis-dockerd

SUDO=""
if [ "$(id -u)" != "0" ]; then
    SUDO="sudo"
fi

# state_dir [ARG]: the absolute state path from ARG, $JARVIS_DOCKER_STATE or the default.
state_dir() {
    dir="${1:-${JARVIS_DOCKER_STATE:-$JARVIS_DOCKER_STATE_DEFAULT}}"
    case "$dir" in
        /*) ;;
        *) dir="$(pwd)/$dir" ;;
    esac
    case "$dir/" in
        */../* | */./*)
            echo "docker state: $dir: write the path without . or .. components" >&2
            return 1
            ;;
    esac
    dir="$(printf '%s' "$dir" | sed 's://*:/:g; s:/$::')"
    printf '%s\n' "${dir:-/}"
}

# root_only PATH: PATH and every directory above it are real directories owned by root
# that no one else can write (or sticky). Prints why not and fails otherwise.
root_only() {
    p="$1"
    while :; do
        if [ -L "$p" ]; then
            echo "docker state: $p is a symlink: refused (it could lead anywhere)" >&2
            return 1
        fi
        if [ ! -d "$p" ]; then
            echo "docker state: $p is not a directory: refused" >&2
            return 1
        fi
        owner="$(stat -c %u "$p")"
        mode="$(stat -c %a "$p")"
        if [ "$owner" != 0 ]; then
            echo "docker state: $p is owned by uid $owner, not root: refused" >&2
            return 1
        fi
        if [ $((0$mode & 022)) -ne 0 ] && [ $((0$mode & 01000)) -eq 0 ]; then
            echo "docker state: $p is writable by others (mode $mode): refused" >&2
            return 1
        fi
        [ "$p" = / ] && return 0
        p="$(dirname "$p")"
    done
}
