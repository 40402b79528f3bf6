"""Shared fixtures.

Every test runs with all jarvis directories in a temporary folder, with no route off
loopback (``refuse_network``: resolving or connecting elsewhere raises), and with
OLLAMA_HOST on a closed loopback port, so a developer's own Ollama is never picked up by
engine auto-selection. Tests that need a
real container engine or a real model use ``require``: locally they skip with the
reason, but under CI (CI=true) a missing engine or model is a failure, never a skip.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from jarvisd._paths import ENV_VARS, paths
from jarvisd.testing import refuse_network

# Where `make setup` pulled the real models, captured before any test isolates paths.
REAL_MODELS_DIR = Path(os.environ.get("JARVIS_TEST_MODELS_DIR") or paths().models)
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(condition: bool, reason: str) -> None:
    """Skip (locally) or fail (in CI) unless ``condition`` holds."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"required in CI: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(autouse=True)
def isolated_dirs(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    # Short base path: Unix socket paths are limited to about 107 bytes.
    root = tmp_path_factory.mktemp("jv")
    for key, var in ENV_VARS.items():
        path = root / key
        path.mkdir(mode=0o700 if key == "runtime" else 0o777)  # jarvisd wants it private
        monkeypatch.setenv(var, str(path))
    monkeypatch.delenv("JARVIS_CONFIG", raising=False)
    monkeypatch.setenv("OLLAMA_HOST", "http://127.0.0.1:9")  # discard: nothing listens
    with refuse_network():
        yield root


def real_model_path(name: str) -> Path:
    """The verified file of catalog model ``name`` pulled by `make setup`."""
    from jarvisd.catalog import get_entry, model_file
    from jarvisd.engines._llamacpp import llama_cpp_available

    require(
        llama_cpp_available(),
        "llama-cpp-python is not installed (run `bash packaging/dev/setup.sh`)",
    )
    path = model_file(get_entry(name), REAL_MODELS_DIR)
    require(
        path.is_file(),
        f"model {name} not pulled into {REAL_MODELS_DIR} (run `bash packaging/dev/setup.sh --test`, or `jarvis models pull NAME`)",
    )
    return path


def link_real_models(*names: str) -> Path:
    """Make catalog models pulled by `make setup` visible in this test's isolated data
    dir (a symlink), so commands can name them; returns the isolated models dir."""
    for name in names:
        real_model_path(name)
    target = paths().models
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(REAL_MODELS_DIR, target_is_directory=True)
    return target


#: Seconds a real-model test may take unless it says otherwise. The suite's 300 s
#: default is for everything else; a model on two cores shared with other work (a CI
#: machine) was seen to run four to six times slower than on a quiet one (the RLM test:
#: 72 s quiet, past 300 s in CI), and a timeout there is noise, not a finding.
MODEL_TEST_TIMEOUT_S = 1200


#: Where the tests that need no container engine, no model, no daemon and no fixed port
#: live (paths from the checkout's root). ``packaging/dev/setup.sh --test`` runs them on
#: both cores first (pytest-xdist, ``-m parallel -n 2``), then the rest one at a time:
#: those count containers and processes, hold the model's threads, or wait on timers.
#: A test here that needs Docker or a model still carries the ``docker``/``model``/
#: ``slow`` marker and stays serial.
PARALLEL_PATHS = (
    "tests/patterns/",
    "tests/protocol/",
    "tests/tools/",
    "tests/runs/",
    "tests/evals/",
    "tests/engines/",
    "tests/mcp/",
    "tests/gateway/",
    "tests/test_",
    "tests/agents/",
    "tests/netpolicy/",
    "tests/code/",
    "tests/bridge/",
    "tests/server/",
    "tests/cli/",
    # Single files elsewhere that need none of those either: parsers, stores and fuzzers.
    "tests/acp/test_store.py",
    "tests/acp/test_wire_fuzz.py",
    "tests/cluster/test_units.py",
    "tests/daemon/test_units.py",
    "tests/external/test_fuzz.py",
    "tests/external/test_judged.py",
    "tests/external/test_registry.py",
    "tests/sandbox/test_mounts.py",
    "tests/ui/test_units.py",
)
#: Exceptions under those paths: claude_code's bridge (its gateway socket's path under
#: xdist's longer temporary directories is too long for AF_UNIX), and a hundred forked
#: kills timed against each other. openhands' scripted runs on the host run in the
#: parallel pass; its sandboxed ones carry the ``docker`` marker.
SERIAL_PATHS = (
    "tests/agents/test_claude_code.py",
    "tests/agents/test_claude_code_credentials.py",
    "tests/code/test_apply_faults.py",
)
_SERIAL_MARKERS = ("docker", "model", "slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("model") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(MODEL_TEST_TIMEOUT_S))
        where = item.path.relative_to(config.rootpath).as_posix()
        if (
            where.startswith(PARALLEL_PATHS)
            and not where.startswith(SERIAL_PATHS)
            and not any(item.get_closest_marker(name) for name in _SERIAL_MARKERS)
        ):
            item.add_marker(pytest.mark.parallel)
