"""Issue 32's "Must show": the inflection case passes end to end on the real 1.5B model,
as a user runs it. The real ``inflection`` 0.5.1 sdist from PyPI (pinned by sha256),
``dasherize`` broken, in a git repository under a 0700 directory (as in root's home);
``jarvis code run DIR TASK --agent native_openhands -m qwen2.5-coder-1.5b
--temperature 0 --test "python -m pytest -q"`` as a separate process, with default flags
(no --no-daemon: no jarvisd runs, so it runs in that process), the host's own pip
configuration and jarvis's directories (isolated by the suite, as every test's).

Asserted: the test before fails on a real assertion (not a missing module); the test
after passes; ``jarvis code apply`` makes the project's own pytest pass on the host; the
setup reached only pip's sources (its net_connect events and its record); a second
run's setup comes from the cache (its seconds are printed, not asserted: the machine
is shared)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jarvisd.code._pipconf import host_pip_sources
from tests.conftest import link_real_models, require
from tests.sandbox.conftest import engine_problem

from .test_setup_sandbox import GOOD, inflection, sdist  # noqa: F401 - fixtures

pytestmark = [pytest.mark.model, pytest.mark.docker, pytest.mark.slow]

TASK = (
    "The tests test_dasherize fail. Fix the bug in the function dasherize in "
    "inflection/__init__.py: underscores must become dashes."
)


def jarvis(*args: str, timeout: float = 1100) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it: its own process, the suite's environment (jarvis's
    directories, DOCKER_HOST), network allowed (the setup's proxy reaches pip's index)."""
    return subprocess.run([sys.executable, "-m", "jarvisd", *args], capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ))  # fmt: skip


def test_the_inflection_bug_is_fixed_on_real_1_5b(inflection: Path) -> None:  # noqa: F811
    problem = engine_problem()
    require(not problem, problem)
    link_real_models("qwen2.5-coder-1.5b")
    # The project is under a 0700 directory (pytest's own), as in root's home.
    assert any(p.stat().st_mode & 0o077 == 0 for p in inflection.parents)

    started = time.perf_counter()
    done = jarvis("code", "run", "--json", str(inflection), TASK, "--agent", "native_openhands",
                  "-m", "qwen2.5-coder-1.5b", "--temperature", "0",
                  "--test", "python -m pytest -q")  # fmt: skip
    took = time.perf_counter() - started
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(done.stdout)
    outcome = record["outcome"]
    before, after = outcome["test_before"], outcome["test_after"]
    assert before["verdict"] == "failed", before
    assert "No module named" not in before["output"]
    assert "AssertionError" in before["output"] or "assert " in before["output"]
    assert "test_dasherize" in before["output"]
    assert after["passed"], after["output"][-1500:]
    assert outcome["files"] == [{"status": "M", "path": "inflection/__init__.py"}], outcome
    setup = outcome["setup"]
    assert setup["cached"] is False and "Successfully installed" in setup["output"]
    # The setup reached pip's sources only: what it connected to, and nothing refused.
    allowed = set(host_pip_sources().hosts())
    assert set(setup["network"]["hosts"]) <= allowed, (setup["network"], allowed)
    assert setup["network"]["refused"] == 0
    print(f"\ninflection on 1.5B: {took:.1f} s, {len(outcome['rounds'])} round(s), "
          f"setup {setup['duration_s']} s, reached {setup['network']['hosts']}, "
          f"after: {after['output'].strip().splitlines()[-1]}")  # fmt: skip

    applied = jarvis("code", "apply", record["id"], timeout=120)
    assert applied.returncode == 0, applied.stderr
    assert GOOD in (inflection / "inflection" / "__init__.py").read_text()
    host = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "test_inflection.py"], cwd=inflection, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert host.returncode == 0, host.stdout[-1500:]

    # A second run's setup comes from the cache. Its agent needs no model to show that:
    # an engine that does not answer ends it right after the setup and the test.
    again = jarvis("code", "run", "--json", str(inflection), "look only", "-e", "ollama",
                   "-m", "none", "--test", "python -m pytest -q -x", timeout=600)  # fmt: skip
    second = json.loads(again.stdout)["outcome"]["setup"]
    assert second["cached"] is True and second["key"] == setup["key"], again.stderr[-2000:]
    assert "from the cache" in again.stderr
    print(f"second run's setup from the cache: {second['duration_s']} s")
