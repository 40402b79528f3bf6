"""The package's import graph has no cycle, its packages keep to their layers
(``LAYERS``, lowest first: an upward import or any cycle between packages fails, named
by file and line), and the daemon client stays light.

The graph is read from the source (every import, also those inside functions, except
under ``if TYPE_CHECKING``); importing ``a.b.c`` also runs ``a/__init__`` and
``a/b/__init__``, so those are edges too.
"""

from __future__ import annotations

import ast
import itertools
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import jarvisd

PACKAGE = Path(jarvisd.__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, is_package: bool) -> dict[str, int]:
    """What the module imports, each with the line of its first import."""
    found: dict[str, int] = {}
    base = module.split(".") if is_package else module.split(".")[:-1]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.setdefault(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - node.level + 1]
                target = ".".join(anchor + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.setdefault(target, node.lineno)
            for alias in node.names:
                found.setdefault(f"{target}.{alias.name}", node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    return {name: set(targets) for name, targets in import_lines().items()}


def import_lines() -> dict[str, dict[str, int]]:
    """Each module's imported modules of the package, with the line that imports them."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, dict[str, int]] = {}
    for name, path in files.items():
        targets: dict[str, int] = {}
        # Packages above this module are already being imported when it runs.
        own = {".".join(name.split(".")[:end]) for end in range(1, name.count(".") + 2)}
        found = _imports(ast.parse(path.read_text()), name, path.name == "__init__.py")
        for imported, line in found.items():
            parts = imported.split(".")
            # The module itself and every package above it run on import.
            for end in range(1, len(parts) + 1):
                candidate = ".".join(parts[:end])
                if candidate in files and candidate not in own:
                    targets.setdefault(candidate, line)
        graph[name] = targets
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state:
                cycle = walk(target)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = walk(node)
            if cycle:
                return cycle
    return None


def test_no_import_cycle_in_jarvisd() -> None:
    # Parsed in a fresh interpreter: CPython 3.11.7's AST constructor can fail with
    # "SystemError: AST constructor recursion depth mismatch" once earlier tests in the
    # same process have left its recursion counter off (seen after tests/bridge).
    code = (
        "import json; from tests.test_import_graph import find_cycle, import_graph; "
        "print(json.dumps(find_cycle(import_graph())))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=PACKAGE.parent, check=True)  # fmt: skip
    cycle = json.loads(out.stdout)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_daemon_client_imports_no_agent_engine_or_runtime_module() -> None:
    code = (
        "import sys; from jarvisd.daemon._client import Client; "
        "heavy = ('jarvisd.agents', 'jarvisd.engines', 'jarvisd.runs._execute', "
        "'jarvisd.runs._build', 'jarvisd.tools', 'jarvisd.sandbox', 'jarvisd.cli', "
        "'jarvisd.daemon._server', 'jarvisd.daemon._tasks'); "
        "print(','.join(sorted(m for m in sys.modules if m.startswith(heavy))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


#: Imports that break the layers and that another branch removes: "FILE -> PACKAGE" and
#: who removes it. They count neither as upward nor as a cycle; once one is gone the test
#: fails, so that it is deleted here (the list cannot outlive them).
PENDING: dict[str, str] = {}

# The layers, lowest first. A module may import the layers below its own, and its own
# layer's packages as long as no two packages import each other (no cycle at all between
# packages). Every subpackage is placed here, with why; a new one fails the test until it
# is. A key is a subpackage ("runs") or a deeper one ("http.gateway": it wins over "http"),
# relative to jarvisd; "*" is every top-level module (jarvisd/*.py) but __main__.
LAYERS: tuple[tuple[str, dict[str, str]], ...] = (
    (
        "foundation",
        {
            "*": "messages, errors, events, paths, config, the run context: what every layer speaks",
            "netpolicy": "the egress policy and its proxy, over the errors alone: the config "
            "checks [sandbox.network] entries with the policy's own parser",
        },
    ),
    (
        "protocol",
        {
            "protocol": "the typed frames between the host and a contained program",
            "http": "the one HTTP server (h11) and its Host/Origin check, over nothing "
            "of jarvis's: the gateway, the console and serve-model are apps on it",
        },
    ),
    (
        "stores",
        {
            "catalog": "the model catalog and GGUF reader (engines read model files with it)",
            "memory": "the memory database (the retrieval tool reads it)",
            "traces": "the run records (run_spec writes them, jarvis trace reads them)",
        },
    ),
    (
        "engines and executors",
        {
            "engines": "what generates: Ollama, llama.cpp, OpenAI-compatible, scripted",
            "executors": "where code runs: the seam and the plain-process executor",
        },
    ),
    (
        "tools",
        {
            "tools": "what an agent may call, over engines (summaries) and memory",
            "mcp": "MCP servers' tools, started through an executor",
            "gateway": "the inference gateway a contained agent calls (over engines alone); "
            "agents and external agents start it, so it sits below them",
        },
    ),
    (
        "sandbox",
        {
            "sandbox": "containers and bubblewrap: a leaf over executors, protocol, netpolicy",
            "bridge": "a contained program's frames served with the host's engine and tools",
        },
    ),
    (
        "agents",
        {
            "agents": "the built-in agents",
            "external": "external agents (ACP and frames) in their sandbox",
        },
    ),
    (
        "patterns",
        {
            "patterns": "teams: agents composed",
        },
    ),
    (
        "runs",
        {
            "runs": "the contract (AgentSpec, RunOutcome, Host) and the wiring (run_spec)",
        },
    ),
    (
        "cluster",
        {
            "cluster": "where a daemon task's worker runs: this machine or a Ray node "
            "(Ray imported only in the relay process)",
        },
    ),
    (
        "serving",
        {
            "code": "jarvis code: workspaces whose runs are runs (registered as a run kind)",
            "daemon": "jarvisd: durable tasks and ask over a socket, DaemonHost its client",
            "http.serve": "the Ollama API and agents served over HTTP (serve-model, serve)",
            "acp": "jarvis acp: jarvis as an ACP agent for editors",
            "ui": "the web console the daemon serves",
            "evals": "jarvis eval: measures that run agents and code runs",
            "testing": "fakes shipped with the package (FakeHost, the Ollama stand-in)",
        },
    ),
    (
        "cli",
        {
            "cli": "the command line: a thin shim over everything below",
            "__main__": "python -m jarvisd",
        },
    ),
)


def layer_of(unit: str) -> int | None:
    """The layer of a package or top-level module (None: not placed)."""
    table = {key: level for level, (_, keys) in enumerate(LAYERS) for key in keys}
    if unit in table:
        return table[unit]
    return table["*"] if not (PACKAGE / unit.partition(".")[0]).is_dir() else None


def unit_of(module: str) -> str:
    """What a module belongs to: its package as placed in LAYERS (the deepest key that
    holds it, else its subpackage), or the top-level module itself (each its own)."""
    rel = module.split(".")[1:] or ["__init__"]
    if not (PACKAGE / rel[0]).is_dir():
        return rel[0]
    keys = {key for _, entries in LAYERS for key in entries}
    for end in range(len(rel), 0, -1):
        if ".".join(rel[:end]) in keys:
            return ".".join(rel[:end])
    return rel[0]


def _where(module: str) -> str:
    path = PACKAGE.parent / module.replace(".", "/")
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    return str(path.relative_to(PACKAGE.parent))


def _name(level: int) -> str:
    return LAYERS[level][0]


def layer_violations(
    lines: dict[str, dict[str, int]], pending: dict[str, str] | None = None
) -> list[str]:
    """Every upward import, unplaced package and cycle between packages, each named
    with the importing file and line (one line per importing line and package)."""
    pending = PENDING if pending is None else pending
    seen_pending: set[str] = set()
    problems: list[str] = []
    units: dict[str, dict[str, str]] = {}  # unit -> imported unit -> a witness
    for module, targets in sorted(lines.items()):
        here = unit_of(module)
        level = layer_of(here)
        if level is None:
            problems.append(f"{_where(module)}: package {here!r} has no layer in LAYERS")
            continue
        named: set[tuple[int, str]] = set()
        # Deepest first: "imports jarvisd.daemon._client" says more than "jarvisd.daemon".
        for target, line in sorted(targets.items(), key=lambda t: (t[1], -t[0].count("."))):
            there = unit_of(target)
            above = layer_of(there)
            if there == here or above is None or (line, there) in named:
                continue
            named.add((line, there))
            if f"{_where(module)} -> {there}" in pending:
                seen_pending.add(f"{_where(module)} -> {there}")
                continue
            witness = f"{_where(module)}:{line} imports {target}"
            units.setdefault(here, {}).setdefault(there, witness)
            if above > level:
                problems.append(
                    f"{witness}: upward, from {here} (layer {_name(level)!r}) "
                    f"to {there} (layer {_name(above)!r})"
                )
    problems += [f"{edge}: gone, delete it from PENDING" for edge in pending.keys() - seen_pending]
    graph = {unit: set(targets) for unit, targets in units.items()}
    cycle = find_cycle(graph)
    if cycle:
        steps = "; ".join(units[a][b] for a, b in itertools.pairwise(cycle))
        problems.append(f"packages in a cycle: {' -> '.join(cycle)} ({steps})")
    return problems


def _violations_in_a_fresh_interpreter() -> list[str]:
    # A fresh interpreter for the AST, as in test_no_import_cycle_in_jarvisd.
    code = (
        "import json; from tests.test_import_graph import import_lines, layer_violations; "
        "print(json.dumps(layer_violations(import_lines())))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=PACKAGE.parent, check=True)  # fmt: skip
    problems: list[str] = json.loads(out.stdout)
    return problems


def test_packages_import_only_their_layer_and_below_with_no_cycle() -> None:
    problems = _violations_in_a_fresh_interpreter()
    assert not problems, "layers broken:\n" + "\n".join(problems)


def test_every_subpackage_is_placed_in_one_layer() -> None:
    keys = [key for _, entries in LAYERS for key in entries]
    assert len(keys) == len(set(keys)), "a package placed twice"
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert packages <= set(keys), f"not placed: {sorted(packages - set(keys))}"


def test_an_upward_import_and_a_cycle_are_named() -> None:
    lines = {
        "jarvisd.sandbox._docker": {"jarvisd.runs._spec": 12, "jarvisd._errors": 3},
        "jarvisd.runs._spec": {"jarvisd._errors": 1},
        "jarvisd.agents._a": {"jarvisd.external._b": 5},
        "jarvisd.external._b": {"jarvisd.agents._a": 7},
    }
    problems = layer_violations(lines, pending={})
    assert problems[0] == (
        "jarvisd/sandbox/_docker.py:12 imports jarvisd.runs._spec: upward, from sandbox "
        "(layer 'sandbox') to runs (layer 'runs')"
    )
    assert problems[-1].startswith("packages in a cycle: agents -> external -> agents")
    assert "jarvisd/external/_b.py:7 imports jarvisd.agents._a" in problems[-1]


def test_ask_reaches_jarvisd_without_the_runtime() -> None:
    """``jarvis ask`` builds its spec and picks jarvisd before it imports any agent,
    engine, tool or sandbox module: jarvisd holds those, and every question would pay
    for them (``jarvisd.sandbox`` alone was about 0.1 s, for ``--allow-net``'s split)."""
    code = (
        "import sys; from jarvisd.cli._ask import ask, pick_host; "
        "from jarvisd.cli._run_options import build_spec; "
        "ctx = ask.make_context('ask', ['hi', '--agent', 'codex', '--allow-net', 'a,b']); "
        "values = {k: v for k, v in ctx.params.items() "
        "          if k not in ('question', 'as_json', 'no_stream', 'no_daemon')}; "
        "assert build_spec('hi', **values).allow_net == ('a', 'b'); pick_host(False); "
        "heavy = ('jarvisd.agents', 'jarvisd.engines', 'jarvisd.runs._execute', "
        "'jarvisd.runs._build', 'jarvisd.tools', 'jarvisd.sandbox', 'jarvisd.external'); "
        "print(','.join(sorted(m for m in sys.modules if m.startswith(heavy))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=PACKAGE.parent, check=True)  # fmt: skip
    assert out.stdout.strip() == ""


#: The modules of jarvis that `jarvis ask` may have imported when its question leaves for
#: jarvisd, each with why it is needed by then. Every question pays for each of them
#: before jarvisd (and the agent it starts) can begin: a module that is needed only to
#: run a question belongs in jarvisd's worker, and one needed only for the answer is
#: imported where the answer is read.
ASK_HANDOFF_MODULES = {
    "jarvisd": "the package (its names load on first use)",
    "jarvisd._lazy": "the packages' lazy names",
    "jarvisd._version": "`jarvis --version`",
    "jarvisd._errors": "the one exception tree",
    "jarvisd._plugins": "the lazy command group's import of the ask command",
    "jarvisd.cli": "the command group",
    "jarvisd.cli._ask": "the ask command",
    "jarvisd.cli._run_options": "its options and the spec they build",
    "jarvisd._runcontext": "the RunContext the Host seam takes (on_delta, the bus)",
    "jarvisd._events": "the run's event bus (tool calls shown as they start)",
    "jarvisd._messages": "Usage, in the run's budget ledger",
    "jarvisd._paths": "where jarvisd's socket is",
    "jarvisd.runs": "the contract",
    "jarvisd.runs._spec": "AgentSpec, what is sent",
    "jarvisd.runs._options": "--option KEY=VALUE parsed at the edge",
    "jarvisd.runs._hosts": "the Host seam DaemonHost implements",
    "jarvisd.runs._outcome": "RunOutcome, what DaemonHost returns",
    "jarvisd.runs._failures": "error replies turned into errors",
    "jarvisd.daemon": "the daemon package (its names load on first use)",
    "jarvisd.daemon._host": "DaemonHost",
    "jarvisd.daemon._client": "the socket client",
    "jarvisd.daemon._identity": "the socket's directory and peer checked",
    "jarvisd.daemon._protocol": "the Ask request",
    "jarvisd.protocol": "the protocol package (its names load on first use)",
    "jarvisd.protocol._message": "the typed messages' base",
}
#: Never on `jarvis ask`'s way to jarvisd, nor after: it talks over a blocking socket
#: (asyncio with ssl and concurrent.futures was about 35 ms of every question), and the
#: frames of the sandbox protocol are jarvisd's business.
ASK_NEVER = ("asyncio", "ssl", "concurrent", "jarvisd.protocol._frames", "jarvisd.protocol._link")

_ASK_DRIVER = """
import json, socket, sys
send = socket.socket.sendall
seen = []
def sendall(self, data, *args):
    if not seen:  # the question, leaving for jarvisd
        seen.append(sorted(sys.modules))
        seen.append(sorted(vars(sys.modules["jarvisd.daemon._protocol"])))
    return send(self, data, *args)
socket.socket.sendall = sendall
from jarvisd.cli import main
try:
    main(["ask", "--agent", "codex", "Say done."])
finally:
    with open(sys.argv[1], "w") as out:
        json.dump({"handoff": seen[0], "protocol": seen[1], "end": sorted(sys.modules)}, out)
"""


def _stand_in_jarvisd(sock_path: Path, got: list[bytes]) -> threading.Thread:
    """A jarvisd that answers one question at once (the client's checks pass: our
    uid, a private directory)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(sock_path))
    server.listen(1)
    server.settimeout(60)

    def serve() -> None:
        with server, server.accept()[0] as conn:
            with conn.makefile("rb") as lines:
                line = lines.readline()
            got.append(line)
            result = {"answer": "done", "agent": "codex"}
            reply = {"v": 1, "id": json.loads(line)["id"], "type": "result", "final": True,
                     "result": result}  # fmt: skip
            conn.sendall(json.dumps(reply).encode() + b"\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_jarvis_ask_hands_its_question_to_jarvisd_with_only_the_client_imported(
    tmp_path: Path,
) -> None:
    """The real `jarvis ask` (its command group, its options, DaemonHost) against a
    jarvisd stand-in on the socket: what it had imported when the question left, and
    at the end. Its time to jarvisd is on the clock of every question (issue 36: a
    sandboxed agent to its first request in 0.4 s, of which this was 0.1 to 0.2 s)."""
    from jarvisd._paths import paths

    got: list[bytes] = []
    server = _stand_in_jarvisd(paths().socket, got)
    out = tmp_path / "modules.json"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run = subprocess.run([sys.executable, "-c", _ASK_DRIVER, str(out)], cwd=workspace,
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(PACKAGE.parent)))  # fmt: skip
    server.join(10)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "done"
    asked = json.loads(got[0])
    assert asked["op"] == "ask" and asked["spec"]["agent"] == "codex"
    assert asked["spec"]["options"]["workspace"] == str(workspace)
    modules = json.loads(out.read_text())
    handoff, end = modules["handoff"], modules["end"]
    extra = sorted(m for m in handoff if m.startswith("jarvisd") and m not in ASK_HANDOFF_MODULES)
    assert not extra, f"`jarvis ask` imported these before its question left: {extra}"
    # The task and status messages (jarvisd.daemon._taskwire) are not created either.
    made = sorted(n for n in modules["protocol"] if n.startswith("Task") or "Status" in n)
    assert made == ["Status"], f"`jarvis ask` created task or status messages: {made}"
    never = {m for m in end if m.startswith(ASK_NEVER)}
    tops = sorted(m for m in never if m.rpartition(".")[0] not in never)
    assert not tops, f"`jarvis ask` through jarvisd imported {tops}"


def test_task_messages_load_when_first_parsed() -> None:
    """The task and status messages live in ``_taskwire``, loaded on first use: a fresh
    process (a client that sent no task request) still parses their ops and replies,
    and names them among the known ops."""
    code = """
import sys
from jarvisd._errors import ProtocolError
from jarvisd.daemon._protocol import parse_reply, parse_request
assert "jarvisd.daemon._taskwire" not in sys.modules
show = parse_request(b'{"v":1,"id":"a","op":"task.show","task":"t1"}')
reply = parse_reply(b'{"v":1,"id":"a","type":"status","final":true,"status":{"pid":7}}')
try:
    parse_request(b'{"v":1,"id":"a","op":"nope"}')
except ProtocolError as exc:
    known = str(exc)
from jarvisd.daemon._protocol import TaskInfo
print(type(show).__name__, show.task, type(reply).__name__, reply.status.pid, TaskInfo.__module__)
print(known)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=PACKAGE.parent, check=True)  # fmt: skip
    first, known = out.stdout.splitlines()
    assert first == "TaskShow t1 StatusReply 7 jarvisd.daemon._taskwire"
    assert "ask, ask.cancel, ping" in known and "task.submit, task.wait" in known
