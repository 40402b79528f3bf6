"""openhands: the OpenHands agent (openhands-sdk, its file editor and terminal) on the
run's model, in its own Python 3.12 venv, in the run's workspace.

The host serves the run's engine through an inference gateway (OpenAI dialect, a
per-run token: every request is the run's, budget and cancel included), and the run's
tools (built-in ones, MCP servers' ``SERVER.tool``, which the run has started) through
the same gateway's MCP endpoint, on the run's ledger like a built-in agent's; it starts
``runners.openhands_runner`` with the venv's packages, speaking frames
(``FrameSession``): its actions and observations arrive as tool-call events, its answer
as the result frame.

It runs in the sandbox by default, like every external agent (the start sequence of
:class:`jarvisd.external.FramedAgent`): the venv and the Python it was made from
mounted read-only (jarvis's frame codec is in every sandbox), the gateway's Unix socket reached through the
container's own loopback, the workspace through the mount allowlist. ``--no-sandbox``
runs it as a host process in a session of its own (gateway on loopback), with a warning
every run. Either way the run's tools run on the host's side of the gateway, like a
built-in agent's: the SDK only calls them.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from .._errors import UsageError
from .._runcontext import RunContext
from ..agents import AgentResult
from ._framed import RUNNER_TIMEOUT_S, FramedAgent, Payload, Runtime
from ._registry import AgentDefinition, GatewayAccess, Launch

__all__ = ["OpenHandsAgent"]

#: The runner's own time limit, a backstop: the run's budgets and cancel stop it first.
_RUNNER_TIMEOUT_S = RUNNER_TIMEOUT_S
#: The directory holding jarvisd/ and runners/: the runner imports the frame codec from it.
_SOURCE = str(Path(__file__).resolve().parents[2])
_RUNNER = "from runners.openhands_runner import entry; entry()"
#: What the runner needs whichever side it runs on.
_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # else litellm fetches a price list
    "OPENHANDS_SUPPRESS_BANNER": "1",
    "PYTHONUNBUFFERED": "1",
}
#: Where the interpreter the venv was made from is mounted in the sandbox.
_PYTHON_INSIDE = "/opt/python"


class OpenHandsAgent(FramedAgent):
    """The OpenHands agent (openhands-sdk) on the run's model, editing a workspace."""

    agent_id: ClassVar[str] = "openhands"
    definition: ClassVar[AgentDefinition] = AgentDefinition(
        "openhands",
        "the OpenHands SDK's venv",
        protocol="frames",
        packages=(("openhands-sdk", "pinned"),),
        needs_node=False,
    )
    program_name: ClassVar[str] = "openhands runner"

    async def _runtime(self) -> Runtime:
        from . import _openhands_venv

        python = await asyncio.to_thread(_openhands_venv.ensure_venv)
        return Runtime(python.parent.parent, str(python), self.engine)

    def _payload(self, input: str, workspace: str) -> Payload:
        return {
            "task": input,
            "workspace": workspace,
            "max_iterations": self.max_turns,
            "system_prompt": self.system_prompt or "",
            # One model request may take as long as the runner may (see the runner).
            "request_timeout": int(_RUNNER_TIMEOUT_S),
        }

    def _wire(
        self,
        payload: Payload,
        runtime: Runtime,
        access: GatewayAccess | None,
        *,
        tools: bool,
        sandboxed: bool,
    ) -> None:
        from ..gateway import MCP_PATH

        assert access is not None  # it has no key of its own: a gateway always runs
        # The token goes in the start frame, never in argv or env.
        payload.update(model=access.model, base_url=access.url + "/v1", api_key=access.token)
        if tools:
            payload["tools_url"] = access.url + MCP_PATH

    def _host_program(self, runtime: Runtime) -> tuple[tuple[str, ...], dict[str, str]]:
        code = f"import sys; sys.path.insert(0, {_SOURCE!r}); {_RUNNER}"
        return (runtime.program, "-B", "-c", code), dict(_ENV)

    def _sandbox_launch(self, runtime: Runtime) -> tuple[Launch, tuple[tuple[str, str], ...]]:
        from ._sandbox import AGENT_DIR, HOME_DIR

        prefix, launch = _sandbox_launch(Path(runtime.program), AGENT_DIR, HOME_DIR)
        return launch, ((str(prefix), _PYTHON_INSIDE),)

    def _result(self, data: Mapping[str, object], run: RunContext, workspace: str) -> AgentResult:
        from ..bridge import wire_tool_results

        answer = data.get("answer")
        answer = answer if isinstance(answer, str) else ""
        results = wire_tool_results(data)
        turns = len(results)
        status = str(data.get("status", ""))[:64]
        metadata: dict[str, object] = {
            "workspace": workspace,
            "status": status,
            "model": self.model,
        }
        if not answer.strip():
            error = f"openhands ended ({status or 'unknown status'}) without an answer"
            metadata["error"] = error
            answer = "Error: " + error
        self._emit_turn_end(run, turns=turns, content=answer[:500])
        return AgentResult(answer, results, turns, metadata, run.budget.used)


def _sandbox_launch(python: Path, venv_inside: str, home_inside: str) -> tuple[Path, Launch]:
    """The interpreter prefix to mount at /opt/python, and how to start the runner in
    the container. The venv's python is a link to the interpreter it was made from: that
    interpreter's whole prefix (stdlib, libpython) is mounted and started directly, with
    the venv's packages added, so no host path has to exist in the container."""
    from ..sandbox._policy import CODE_ROOT

    venv = python.parent.parent
    interpreter = Path(os.path.realpath(python))
    site = next(venv.glob("lib/python3.*/site-packages"), None)
    if site is None:
        raise UsageError(
            f"the openhands venv {venv} has no site-packages: reinstall it with "
            "`jarvis agents install openhands`"
        )
    inside_site = f"{venv_inside}/{site.relative_to(venv)}"
    # jarvis's own code is at CODE_ROOT in every sandbox container (the frame codec).
    runner = (
        f"import site, sys; site.addsitedir({inside_site!r}); "
        f"sys.path.insert(0, {CODE_ROOT!r}); {_RUNNER}"
    )
    env = {
        **_ENV,
        "HOME": home_inside,
        "LANG": "C.UTF-8",
        "LD_LIBRARY_PATH": f"{_PYTHON_INSIDE}/lib",  # a shared libpython lives there
    }
    argv = (f"{_PYTHON_INSIDE}/bin/" + interpreter.name, "-B", "-c", runner)
    return interpreter.parent.parent, Launch(argv, env)
