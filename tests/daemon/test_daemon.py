"""Integration tests: a real jarvisd on a temporary socket."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from jarvisd._errors import DaemonError, DaemonUnavailable, TaskNotFound
from jarvisd.daemon import Client
from jarvisd.daemon._server import take_lock
from jarvisd.engines import ScriptedEngine
from jarvisd.runs import AgentSpec
from tests.conftest import require

from .conftest import DaemonProcess, alive, still_alive

pytestmark = pytest.mark.slow


def events_of(client: Client, task_id: str) -> list[tuple[str, dict[str, Any]]]:
    return [(e.event, dict(e.data)) for e in client.logs(task_id)]


def test_submit_follow_wait_show(jarvisd: DaemonProcess) -> None:
    jarvisd.start()
    c = jarvisd.client
    info = c.submit(AgentSpec(input="hello"))
    assert info.state in ("queued", "running") and len(info.id) == 12
    followed = list(c.logs(info.id, follow=True))
    kinds = [e.event for e in followed]
    assert kinds[0] == "task_start" and kinds[-1] == "task_end"
    assert "".join(e.data["text"] for e in followed if e.event == "inference_delta") == (
        "answer to hello"
    )
    assert [e.seq for e in followed] == list(range(1, len(followed) + 1))
    done = c.wait(info.id)
    assert done.state == "succeeded" and done.result is not None
    assert done.result["answer"] == "answer to hello"
    assert done.cpu_seconds > 0 and done.memory_bytes > 10_000_000  # a real worker process
    # resumable follow: only events after --from
    later = list(c.logs(info.id, since=3))
    assert [e.seq for e in later] == list(range(4, len(followed) + 1))
    assert c.show(info.id[:6]).id == info.id  # a unique prefix names a task
    assert [t.id for t in c.list_tasks()] == [info.id]
    with pytest.raises(TaskNotFound):
        c.show("ffffffffffff")


def test_cancel_stops_worker_and_closes_open_tool_call(
    jarvisd: DaemonProcess, engine: ScriptedEngine
) -> None:
    engine.latency_s = 1.0
    jarvisd.start()
    c = jarvisd.client
    info = c.submit(AgentSpec(input="use llm", agent="orchestrator", tools=("llm",)))
    jarvisd.wait_for(
        lambda: any(k == "tool_call_start" for k, _ in events_of(c, info.id)), what="tool call"
    )
    pid = c.show(info.id).worker_pid
    assert pid is not None and psutil.pid_exists(pid)
    started = time.monotonic()
    cancelled = c.cancel(info.id)
    assert cancelled.state == "cancelled", cancelled
    assert time.monotonic() - started < 5
    assert not alive(pid)
    evs = events_of(c, info.id)
    ends = [d for k, d in evs if k == "tool_call_end"]
    assert len(ends) == 1 and ends[0]["synthetic"] and ends[0]["status"] == "cancelled"
    assert evs[-1] == ("task_end", {"state": "cancelled", "reason": "cancelled by the user"})


def test_kill9_then_restart_resumes_or_interrupts_and_loses_nothing(
    jarvisd: DaemonProcess, engine: ScriptedEngine
) -> None:
    engine.latency_s = 1.5
    jarvisd.write_config("max_concurrent = 2")
    jarvisd.start()
    c = jarvisd.client
    calc = c.submit(AgentSpec(input="use calc on 2+2", agent="orchestrator", tools=("calculator",)))
    llm = c.submit(AgentSpec(input="use llm", agent="orchestrator", tools=("llm",)))
    queued = c.submit(AgentSpec(input="queued one"))

    def ready() -> bool:
        open_llm = [k for k, _ in events_of(c, llm.id)].count("tool_call_start") == 1
        return c.show(calc.id).checkpoint_turns >= 1 and open_llm

    jarvisd.wait_for(ready, what="a checkpoint in one task and a tool call in flight in another")
    workers = [c.show(t).worker_pid for t in (calc.id, llm.id)]
    jarvisd.kill9()
    assert jarvisd.paths.socket.exists()  # kill -9 leaves it: the next start must cope
    assert not still_alive(workers), "workers outlived jarvisd"
    jarvisd.start()
    final = {t: c.wait(t, timeout=30) for t in (calc.id, llm.id, queued.id)}
    # resumed from its last completed model turn; the calculator ran once, not twice
    assert final[calc.id].state == "succeeded", final[calc.id]
    calc_result = final[calc.id].result
    assert calc_result is not None and calc_result["answer"] == "done: 4"
    assert calc_result["metadata"].get("resumed") is True
    calc_events = events_of(c, calc.id)
    assert [k for k, _ in calc_events].count("tool_call_start") == 1
    assert any(k == "task_resumed" for k, _ in calc_events)
    # the tool call in flight: marked, not replayed
    assert final[llm.id].state == "interrupted"
    assert "effect unverified" in final[llm.id].reason
    llm_events = events_of(c, llm.id)
    assert [k for k, _ in llm_events].count("tool_call_start") == 1
    closing = [d for k, d in llm_events if k == "tool_call_end"]
    assert closing and closing[0]["status"] == "effect_unverified" and closing[0]["synthetic"]
    inner = [x for x in engine.calls if x.messages[-1].content == "inner question"]
    assert len(inner) == 1  # the llm tool's engine call was never made a second time
    assert final[queued.id].state == "succeeded"
    assert {t.id for t in c.list_tasks()} == {calc.id, llm.id, queued.id}


def test_sigterm_checkpoints_running_task_and_next_start_resumes(
    jarvisd: DaemonProcess, engine: ScriptedEngine
) -> None:
    engine.latency_s = 1.5
    jarvisd.start()
    c = jarvisd.client
    calc = c.submit(AgentSpec(input="use calc on 2+2", agent="orchestrator", tools=("calculator",)))
    jarvisd.wait_for(lambda: c.show(calc.id).checkpoint_turns >= 1, what="a checkpoint")
    assert jarvisd.terminate() == 0
    assert not jarvisd.paths.socket.exists() and not jarvisd.paths.pid_file.exists()
    with pytest.raises(DaemonUnavailable):
        c.ping()
    jarvisd.start()
    done = c.wait(calc.id, timeout=30)
    assert done.state == "succeeded" and done.result and done.result["answer"] == "done: 4"
    assert [k for k, _ in events_of(c, calc.id)].count("tool_call_start") == 1


def test_second_instance_refused(jarvisd: DaemonProcess) -> None:
    jarvisd.start()
    second = subprocess.run(
        [sys.executable, "-m", "jarvisd.daemon"], capture_output=True, text=True, timeout=30
    )
    assert second.returncode == 73, second.stderr
    assert "already answers" in second.stderr
    assert jarvisd.client.ping().pid == jarvisd.proc.pid  # type: ignore[union-attr]


def test_one_daemon_per_database_even_when_started_together(jarvisd: DaemonProcess) -> None:
    argv = [sys.executable, "-m", "jarvisd.daemon"]
    # Whoever holds the database's lock owns it, socket or not...
    fd = take_lock(jarvisd.paths.lock_file)
    assert fd is not None
    try:
        held = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    finally:
        os.close(fd)
    assert held.returncode == 73 and "holds" in held.stderr, held.stderr
    assert not jarvisd.paths.socket.exists()
    # ...so of two started at the same moment, one serves and the other is refused
    # (both would otherwise recover and run the same tasks).
    both = [subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            for _ in range(2)]  # fmt: skip
    try:
        jarvisd.wait_for(lambda: any(p.poll() is not None for p in both), what="one to exit")
        loser = next(p for p in both if p.poll() is not None)
        winner = next(p for p in both if p is not loser)
        assert loser.returncode == 73, loser.communicate()[1]
        jarvisd.wait_for(lambda: winner.poll() is None and jarvisd.paths.socket.exists(),
                         what="the other to serve")  # fmt: skip
        assert jarvisd.client.ping().pid == winner.pid
    finally:
        for p in both:
            if p.poll() is None:
                p.terminate()
            p.communicate(timeout=30)
    assert winner.returncode == 0


def test_socket_is_private(jarvisd: DaemonProcess) -> None:
    jarvisd.start()
    assert jarvisd.paths.socket.stat().st_mode & 0o777 == 0o600
    assert jarvisd.paths.socket.parent.stat().st_mode & 0o777 == 0o700


_NOBODY_CLIENT = """
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except OSError as exc:
    print(json.dumps({"connect_error": exc.errno})); sys.exit(0)
try:  # the daemon may already have answered and closed: read its reply anyway
    s.sendall(b'{"v":1,"id":"x","op":"task.list"}\\n')
except OSError:
    pass
s.settimeout(10)
print(s.makefile("rb").readline().decode().strip() or "{}")
"""


def test_connection_from_another_uid_refused(jarvisd: DaemonProcess) -> None:
    require(os.getuid() == 0, "needs root to run a client as another uid")
    python = shutil.which("python3", path="/usr/bin:/bin")
    require(python is not None, "needs a system python3 that uid 65534 may execute")
    jarvisd.start()
    sock = str(jarvisd.paths.socket)
    run_as_nobody = [str(python), "-I", "-c", _NOBODY_CLIENT, sock]
    kw = {"user": 65534, "group": 65534, "extra_groups": [], "capture_output": True, "text": True}
    # With the normal modes the filesystem already keeps other users out...
    out = subprocess.run(run_as_nobody, timeout=30, **kw)  # type: ignore[call-overload]
    assert out.stdout and json.loads(out.stdout) == {"connect_error": 13}, out
    # ...and when it does not (modes opened up), the daemon refuses by SO_PEERCRED.
    runtime = jarvisd.paths.socket.parent
    for d in (runtime, *runtime.parents):
        if d == Path("/"):
            break
        d.chmod(d.stat().st_mode | 0o011)
    jarvisd.paths.socket.chmod(0o666)
    out = subprocess.run(run_as_nobody, timeout=30, **kw)  # type: ignore[call-overload]
    assert out.stdout, out
    reply = json.loads(out.stdout)
    assert reply["type"] == "error" and reply["code"] == "denied", out
    assert "uid 65534" in reply["message"]
    runtime.chmod(0o700)  # our own client refuses a directory others may enter
    assert jarvisd.client.ping().pid  # still serving its own user
    assert "refused a connection from uid 65534" in jarvisd.log_text()


def test_frame_limits_and_garbage(jarvisd: DaemonProcess) -> None:
    jarvisd.write_config("max_frame_bytes = 4096")
    jarvisd.start()

    def exchange(payload: bytes) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(str(jarvisd.paths.socket))
            s.sendall(payload)
            reply: dict[str, Any] = json.loads(s.makefile("rb").readline())
            return reply

    assert exchange(b"x" * 10_000 + b"\n")["code"] == "frame_too_large"
    assert exchange(b"not json\n")["code"] == "bad_request"
    assert exchange(b'{"v": 2, "op": "ping"}\n')["code"] == "version"
    assert exchange(b'{"v": 1, "id": "q", "op": "nope"}\n') == {
        "v": 1, "id": "q", "type": "error", "final": True, "code": "bad_request",
        "message": "unknown op 'nope' (known: ask, ask.cancel, ping, shutdown, status, task.answer, "
        "task.cancel, task.list, task.logs, task.show, task.submit, task.wait, ui.login)",
    }  # fmt: skip
    bad_spec = b'{"v":1,"id":"s","op":"task.submit","spec":{"input":3}}\n'
    assert exchange(bad_spec)["code"] == "bad_request"
    # the connection survives a bad line: the next request on it is answered
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(jarvisd.paths.socket))
        s.sendall(b"{oops\n" + b'{"v":1,"id":"p","op":"ping"}\n')
        lines = s.makefile("rb")
        assert json.loads(lines.readline())["type"] == "error"
        assert json.loads(lines.readline())["type"] == "pong"
    assert jarvisd.client.ping().pid


def test_queue_limit_and_time_limit(jarvisd: DaemonProcess, engine: ScriptedEngine) -> None:
    engine.latency_s = 3.0
    jarvisd.write_config("max_concurrent = 1\nmax_queued = 1\ntask_timeout = 1.0")
    jarvisd.start()
    c = jarvisd.client
    first = c.submit(AgentSpec(input="one"))
    jarvisd.wait_for(lambda: c.show(first.id).state == "running", what="running")
    second = c.submit(AgentSpec(input="two"))
    with pytest.raises(DaemonError, match="queue is full"):
        c.submit(AgentSpec(input="three"))
    time.sleep(0.5)
    assert c.show(second.id).state == "queued"  # max_concurrent = 1: it waits its turn
    assert (c.status().running, c.status().queued) == (1, 1)
    done = c.wait(first.id, timeout=20)
    assert done.state == "cancelled" and "time limit of 1 s" in done.reason


def test_config_reload_keeps_old_config_when_bad(jarvisd: DaemonProcess) -> None:
    jarvisd.start()
    c = jarvisd.client
    assert c.status().max_concurrent == 2
    jarvisd.config_file.write_text("[daemon]\nmax_concurrent = 'many'\n")
    jarvisd.wait_for(lambda: c.status().config_error != "", what="the reload error")
    st = c.status()
    assert "daemon.max_concurrent" in st.config_error and st.max_concurrent == 2
    assert "config reload refused" in jarvisd.log_text()
    jarvisd.write_config("max_concurrent = 3")
    jarvisd.wait_for(lambda: c.status().max_concurrent == 3, what="the good config")
    assert c.status().config_error == ""


def test_sighup_reloads_the_config_and_keeps_serving(jarvisd: DaemonProcess) -> None:
    jarvisd.start()
    assert jarvisd.proc is not None
    before = jarvisd.log_text().count("configuration reloaded")
    jarvisd.proc.send_signal(signal.SIGHUP)
    jarvisd.wait_for(
        lambda: jarvisd.log_text().count("configuration reloaded") > before, what="the reload"
    )
    assert jarvisd.proc.poll() is None and jarvisd.client.ping().pid == jarvisd.proc.pid


def test_watch_reruns_on_change_ignoring_git(jarvisd: DaemonProcess, tmp_path: Path) -> None:
    watched = tmp_path / "src"
    (watched / ".git").mkdir(parents=True)
    jarvisd.start()
    c = jarvisd.client
    origin = c.submit(AgentSpec(input="lint it"), watch=str(watched))
    assert c.wait(origin.id, timeout=20).state == "succeeded"
    (watched / ".git" / "index").write_text("x")
    time.sleep(2.0)
    assert len(c.list_tasks()) == 1  # .git changes are not changes
    for i in range(3):  # a burst: one re-run
        (watched / "a.py").write_text(f"x = {i}\n")
    jarvisd.wait_for(lambda: len(c.list_tasks()) == 2, what="a re-run")
    rerun = next(t for t in c.list_tasks() if t.id != origin.id)
    assert rerun.rerun_of == origin.id and c.wait(rerun.id, timeout=20).state == "succeeded"
    time.sleep(1.5)
    assert len(c.list_tasks()) == 2
    assert c.status().watches == 1
    c.cancel(origin.id)  # cancelling the watched task ends the watch
    assert c.status().watches == 0


def _jarvis(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    exe = str(Path(sys.executable).parent / "jarvis")
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60, env=env)


def test_ask_through_daemon_prints_the_same(jarvisd: DaemonProcess) -> None:
    jarvisd.start()
    via_daemon = _jarvis("ask", "hello there")
    in_process = _jarvis("ask", "--no-daemon", "hello there")
    assert via_daemon.returncode == in_process.returncode == 0, via_daemon.stderr
    assert via_daemon.stdout == in_process.stdout == "answer to hello there\n"
    a = json.loads(_jarvis("ask", "--json", "hi").stdout)
    b = json.loads(_jarvis("ask", "--json", "--no-daemon", "hi").stdout)
    a.pop("duration_s"), b.pop("duration_s")
    assert a == b and a["answer"] == "answer to hi"
    # The daemon really answers: with a config whose engine cannot be reached, this
    # process fails on its own, yet through the daemon (its own config) it answers.
    dead = jarvisd.root / "dead-engine.toml"
    dead.write_text('[engine]\ndefault = "ollama"\n[engine.ollama]\nhost = "http://127.0.0.1:9"\n')
    env = dict(os.environ, JARVIS_CONFIG=str(dead))
    assert _jarvis("ask", "--no-daemon", "hello there", env=env).returncode != 0
    routed = _jarvis("ask", "hello there", env=env)
    assert routed.returncode == 0 and routed.stdout == "answer to hello there\n", routed.stderr


def test_task_cli(jarvisd: DaemonProcess) -> None:
    jarvisd.start()
    submitted = _jarvis("task", "submit", "from the cli")
    assert submitted.returncode == 0, submitted.stderr
    task_id = submitted.stdout.strip()
    waited = _jarvis("task", "wait", task_id)
    assert waited.returncode == 0 and waited.stdout == "answer to from the cli\n"
    logs = _jarvis("task", "logs", task_id)
    assert "answer to from the cli" in logs.stdout and "task succeeded" in logs.stdout
    shown = json.loads(_jarvis("task", "show", task_id, "--json").stdout)
    assert shown["state"] == "succeeded"
    listed = json.loads(_jarvis("task", "list", "--json").stdout)
    assert [t["id"] for t in listed] == [task_id]
    status = json.loads(_jarvis("daemon", "status", "--json").stdout)
    assert status["pid"] == jarvisd.proc.pid and status["tasks_total"] == 1  # type: ignore[union-attr]
    missing = _jarvis("task", "show", "abcdef")
    assert missing.returncode == 2 and "no task" in missing.stderr


def test_daemon_start_stop_cli(isolated_dirs: Path, standin: object) -> None:
    not_running = _jarvis("daemon", "status")
    assert not_running.returncode == 3 and "no jarvisd" in not_running.stderr
    started = _jarvis("daemon", "start")
    assert started.returncode == 0, started.stderr
    try:
        again = _jarvis("daemon", "start")
        assert again.returncode == 1 and "already running" in again.stderr
        status = _jarvis("daemon", "status")
        assert "0 running" in status.stdout and "memory:" in status.stdout
    finally:
        stopped = _jarvis("daemon", "stop")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stderr
    assert _jarvis("daemon", "status").returncode == 3
