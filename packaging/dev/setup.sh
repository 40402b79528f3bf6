#!/usr/bin/env bash
# Set up jarvis on a fresh Debian/Ubuntu machine (or re-check an existing setup), then
# optionally run the demo or the whole test suite.
#
#   packaging/dev/setup.sh            set up: system packages, .venv, llama.cpp, default model
#   packaging/dev/setup.sh --demo     ...then answer a question with the embedded model
#   packaging/dev/setup.sh --test     ...then start a private Docker engine, build the
#                                     sandbox image, pull the test model, lint, type-check
#                                     and run every test
#
# Idempotent: a second run only checks. llama-cpp-python has no wheel on PyPI, so it is
# compiled once (5 to 15 minutes on 2 cores) into a cache directory that later runs reuse:
# JARVIS_WHEEL_CACHE (default ~/.cache/jarvis/wheels).
set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT=$(pwd)
MODE=${1:-setup}
LLAMA_VERSION=0.3.36
# Portable CPU build: native builds used AVX-512/AMX paths that crash in some VMs, and a
# cached wheel must run on every machine of the same kind.
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF"
WHEEL_CACHE=${JARVIS_WHEEL_CACHE:-$HOME/.cache/jarvis/wheels}/llama-$LLAMA_VERSION-portable-1
VENV=$ROOT/.venv
PY=$VENV/bin/python

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

apt_install() {
    # Install the Debian packages that are missing (none: no apt-get at all).
    local missing=()
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if ! command -v apt-get >/dev/null; then
        say "please install: ${missing[*]} (no apt-get here)"; return 1
    fi
    say "installing ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

apt_install_cached() {
    # As apt_install, keeping the downloaded .debs in JARVIS_APT_CACHE (default
    # ~/.cache/jarvis/apt): a later run on this machine, or a reinstall, downloads
    # nothing. On a bare machine the package lists are fetched first.
    local cache=${JARVIS_APT_CACHE:-$HOME/.cache/jarvis/apt} missing=()
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    command -v apt-get >/dev/null || { say "please install: ${missing[*]} (no apt-get here)"; return 1; }
    say "installing ${missing[*]} (.debs cached in $cache)"
    mkdir -p "$cache/partial"
    local apt=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends
               -o "Dir::Cache::archives=$cache" -o APT::Sandbox::User=root)
    as_root "${apt[@]}" "${missing[@]}" >/dev/null 2>&1 \
        || { as_root apt-get update -qq && as_root "${apt[@]}" "${missing[@]}" >/dev/null; }
}

python_ok() { "$1" -c 'import sys, venv; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; }

setup_python() {
    local base=${JARVIS_PYTHON:-python3}
    if ! python_ok "$base"; then
        apt_install python3 python3-venv python3-dev
        python_ok "$base" || { say "jarvis needs Python >= 3.11 with venv (set JARVIS_PYTHON)"; exit 1; }
    fi
    command -v cc >/dev/null && command -v c++ >/dev/null && command -v cmake >/dev/null || apt_install build-essential cmake
    if [ ! -x "$PY" ]; then
        say "creating $VENV"
        "$base" -m venv "$VENV"
    fi
    setup_docs_cache
    say "installing jarvis and its dependencies into .venv"
    "$PY" -m pip install -q --disable-pip-version-check -e ".[dev]" 2>&1 | grep -v '^WARNING: Location' || true
    "$PY" -c 'import jarvisd' || { say "installing jarvis failed"; exit 1; }
}

setup_docs_cache() {
    # The docs site's theme, mkdocs-material (a dev extra), is 14,600 files (its icons);
    # with babel and tzdata, installing it into every fresh .venv (CI's clone) took 10 to
    # 40 s on 2 busy cores. It is installed once into a cache directory keyed by the
    # versions (JARVIS_DOCS_CACHE, default ~/.cache/jarvis/docs), which the venv reads
    # through a .pth file: pip then finds those pins satisfied and installs only the rest.
    local pins dir
    pins="$(grep -oE 'mkdocs-material==[0-9.]+' pyproject.toml) babel==2.19.0 tzdata==2026.6"
    dir=${JARVIS_DOCS_CACHE:-$HOME/.cache/jarvis/docs}/$(echo "$pins" | sha256sum | cut -c1-16)
    if [ ! -f "$dir/.jarvis-complete" ]; then
        say "installing the docs theme once into $dir"
        rm -rf "$dir"
        # shellcheck disable=SC2086 # the pins are words
        "$PY" -m pip install -q --disable-pip-version-check --no-deps --target "$dir" $pins 2>&1 | grep -v '^WARNING: Location' || true
        "$PY" -c "import sys; sys.path.insert(0, '$dir'); import material, babel" && touch "$dir/.jarvis-complete"
    fi
    echo "$dir" > "$("$PY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/jarvis-docs-cache.pth"
}

setup_cluster() {
    # The cluster extra (Ray, for [cluster] backend = "ray" and tests/cluster/): a
    # wheel of some 70 MB, which pip's own cache (~/.cache/pip) keeps for the next run.
    local want
    want=$(grep -oE 'ray==[0-9.]+' pyproject.toml | cut -d= -f3)
    "$PY" -c "import ray, sys; sys.exit(ray.__version__ != '$want')" 2>/dev/null && return 0
    say "installing the cluster extra (ray $want)"
    "$PY" -m pip install -q --disable-pip-version-check -e ".[cluster]" 2>&1 | grep -v '^WARNING: Location' || true
    "$PY" -c 'import ray' || { say "installing ray failed"; exit 1; }
}

setup_ssh() {
    # The ssh extra (paramiko, for ssh:// engines and tests/sandbox's ssh engine), and
    # the sshd that test runs; pip's cache and the .deb cache keep both for the next run.
    "$PY" -c 'import paramiko' 2>/dev/null || {
        say "installing the ssh extra (paramiko)"
        "$PY" -m pip install -q --disable-pip-version-check -e ".[ssh]" 2>&1 | grep -v '^WARNING: Location' || true
        "$PY" -c 'import paramiko' || { say "installing paramiko failed"; exit 1; }
    }
    apt_install_cached openssh-server
}

setup_bfcl() {
    # `jarvis eval bfcl` and benchmarks/bench_bfcl.py: BFCL's data and checker. Without
    # its dependencies (every API SDK, sentence-transformers, torch): the checker needs
    # none. Installed last: pip's resolver would otherwise list its missing dependencies
    # as errors at every later install.
    "$PY" -c 'import bfcl_eval' 2>/dev/null && return 0
    "$PY" -m pip install -q --disable-pip-version-check --no-deps "bfcl-eval==2026.3.23" 2>&1 | grep -v '^WARNING: Location' || true
}

setup_llama() {
    if "$PY" -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '$LLAMA_VERSION')" 2>/dev/null \
        && [ -f "$VENV/.llama-portable-1" ]; then
        return 0
    fi
    mkdir -p "$WHEEL_CACHE"
    if ! ls "$WHEEL_CACHE"/llama_cpp_python-$LLAMA_VERSION-*.whl >/dev/null 2>&1; then
        say "building llama-cpp-python $LLAMA_VERSION once (5 to 15 minutes on 2 cores); cached in $WHEEL_CACHE"
        local tmp; tmp=$(mktemp -d)
        CMAKE_ARGS="$LLAMA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
            "$PY" -m pip wheel -q --disable-pip-version-check --no-deps --no-cache-dir -w "$tmp" \
            "llama-cpp-python==$LLAMA_VERSION" 2>&1 | grep -v '^WARNING: Location' || true
        ls "$tmp"/llama_cpp_python-*.whl >/dev/null 2>&1 || { say "building llama-cpp-python failed"; exit 1; }
        mv "$tmp"/llama_cpp_python-*.whl "$WHEEL_CACHE"/
        rm -rf "$tmp"
    fi
    say "installing llama-cpp-python from $WHEEL_CACHE"
    "$PY" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$WHEEL_CACHE"/llama_cpp_python-$LLAMA_VERSION-*.whl 2>&1 | grep -v '^WARNING: Location' || true
    "$PY" -m pip install -q --disable-pip-version-check "llama-cpp-python==$LLAMA_VERSION" --find-links "$WHEEL_CACHE" 2>&1 | grep -v '^WARNING: Location' || true
    "$PY" -c 'import llama_cpp' && touch "$VENV/.llama-portable-1"
}

pull_model() { "$VENV/bin/jarvis" models pull "$1" >/dev/null; }

setup_python
setup_llama
if [ "$MODE" = --test ]; then setup_cluster; setup_ssh; fi
setup_bfcl
say "fetching the default model"
pull_model smollm2-135m

case "$MODE" in
    setup) say "ready: .venv/bin/jarvis ask \"your question\"" ;;
    --demo)
        say "asking the embedded model a question"
        "$VENV/bin/jarvis" ask "Name three primary colors."
        ;;
    --test)
        say "fetching the test model"
        pull_model qwen2.5-coder-0.5b
        pull_model qwen2.5-coder-1.5b
        # The Node.js side of the frame protocol (node_bridge/) is tested with real node.
        command -v node >/dev/null || apt_install nodejs
        # The web console's browser tests drive Debian's chromium (Playwright never
        # downloads a browser of its own).
        apt_install_cached chromium fonts-liberation
        # The openhands agent's own Python 3.12 venv (cached; about 3 minutes the first time).
        say "installing the openhands agent's venv (cached under ~/.cache/jarvis/venvs)"
        "$VENV/bin/jarvis" agents install openhands
        # The Claude Agent SDK for claude_code (pinned lockfile; cached under ~/.cache/jarvis/agents).
        "$VENV/bin/jarvis" agents install claude_code
        say "starting a private Docker engine for the sandbox tests"
        eval "$(bash packaging/dev/docker-up.sh)"
        export DOCKER_HOST
        if [ "$(id -u)" != 0 ] && [ -z "${JARVIS_SG:-}" ] && ! docker version >/dev/null 2>&1; then
            # Just added to the engine socket's group: go on in a shell that has it.
            group=${JARVIS_DOCKER_GROUP:-jarvis-docker}
            say "continuing as a member of $group"
            exec env JARVIS_SG=1 sg "$group" -c "bash packaging/dev/setup.sh --test"
        fi
        "$VENV/bin/jarvis" sandbox build
        # The external agents' pinned npm trees (cached in ~/.cache/jarvis/agents).
        say "installing the external agents (opencode, codex, claude, gemini)"
        "$VENV/bin/jarvis" agents install opencode codex claude gemini
        # acpx, the headless ACP client that drives `jarvis acp` in tests (pinned lockfile;
        # cached in ~/.cache/jarvis/test-tools/acpx, installed again when the lock changes).
        ACPX_DIR=${JARVIS_ACPX_DIR:-$HOME/.cache/jarvis/test-tools/acpx}
        acpx_lock=$(sha256sum packaging/dev/acpx/package-lock.json | cut -d' ' -f1)
        if [ "$(cat "$ACPX_DIR/.jarvis-installed" 2>/dev/null)" != "$acpx_lock" ]; then
            say "installing acpx for the ACP tests (cached in $ACPX_DIR)"
            rm -rf "$ACPX_DIR" && mkdir -p "$ACPX_DIR"
            cp packaging/dev/acpx/package.json packaging/dev/acpx/package-lock.json "$ACPX_DIR/"
            # `npm install` when `npm ci` calls the lock out of sync (a registry without some
            # platforms' optional packages): it still installs the locked versions.
            (cd "$ACPX_DIR" && { npm ci --no-audit --no-fund --ignore-scripts --loglevel=error 2>/dev/null \
                || npm install --no-audit --no-fund --ignore-scripts --loglevel=error; })
            test -x "$ACPX_DIR/node_modules/.bin/acpx"
            echo "$acpx_lock" > "$ACPX_DIR/.jarvis-installed"
        fi
        say "lint and type check"
        "$VENV/bin/ruff" check jarvisd tests runners benchmarks
        "$VENV/bin/ruff" format --check jarvisd tests runners benchmarks
        # mypy's cache outside the checkout (a CI run starts from a fresh clone): a
        # whole-tree check costs a minute on 2 cores, an unchanged tree about a second.
        # mypy checks each cached module's source hash and the options before using it.
        MYPY_CACHE_DIR=${MYPY_CACHE_DIR:-$HOME/.cache/jarvis/mypy} "$VENV/bin/mypy"
        # The documentation site, strict: a broken link, a missing page, or a command or
        # option the pages show that the CLI lacks fails here (packaging/docs/hooks.py).
        say "building the documentation (mkdocs build --strict)"
        docs_site=$(mktemp -d)
        NO_MKDOCS_2_WARNING=1 "$VENV/bin/mkdocs" build --strict --site-dir "$docs_site"  # not --quiet: it hides the warnings --strict counts
        rm -rf "$docs_site"
        say "running every test"
        export CI=${CI:-true}
        # Two passes: the tests marked `parallel` (tests/conftest.py: no container engine,
        # no model, no daemon, no fixed port) on both cores, then the rest one at a time
        # (they count containers and processes, hold the model's threads, wait on timers).
        # Both passes always run; the first failing one's status is the result.
        status=0
        "$PY" -m pytest -q -p no:cacheprovider -n 2 -m parallel || status=$?
        # The serial pass names its 25 slowest tests: where CI's time goes, in every log.
        "$PY" -m pytest -q -p no:cacheprovider -m "not parallel" --durations=40 || status=$?
        exit "$status"
        ;;
    *) say "unknown mode $MODE (use --demo or --test)"; exit 2 ;;
esac
