"""Daemon tasks on a real Ray cluster (``[cluster] backend = "ray"``), through a real
jarvisd on a real socket whose scripted engine is a real Ollama-protocol server."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest

from jarvisd._errors import UsageError
from jarvisd._messages import Generation, Message, Role
from jarvisd.daemon import TaskInfo
from jarvisd.runs import AgentSpec
from jarvisd.testing import OllamaStandIn

from ..conftest import require
from ..daemon.conftest import DaemonProcess, SlowOnCue, script
from ..sandbox.conftest import engine_problem
from .conftest import RayCluster, ray_config

pytestmark = pytest.mark.slow

#: The prompts, each with and without a tool call: cycled over the 30 tasks.
PROMPTS = (
    "what is red",
    "use calc on 2+2",
    "in a box: what is blue",
    "use calc here",
    "name a tree",
    "in a box: use calc",
)
TASKS = 30


class HeldOnCue(SlowOnCue):
    """As :class:`SlowOnCue`; and "held" questions (and the llm tool's "inner question")
    are answered once ``release`` is set."""

    release = threading.Event()
    #: The last user message of every question, as it comes in (answered or not).
    asked: list[str] = []

    async def generate(self, messages: Sequence[Message], **kwargs: Any) -> Generation:
        users = [m.content for m in messages if m.role is Role.USER]
        self.asked.append(users[-1] if users else "")
        # The llm tool's own model call too: a tool call stays in flight meanwhile.
        if any(
            "held" in m.content or m.content == "inner question"
            for m in messages
            if m.role is Role.USER
        ):
            # Waited in a thread: the server's other requests go on meanwhile.
            await asyncio.to_thread(self.release.wait, 600)
        return await super().generate(messages, **kwargs)


@pytest.fixture(scope="module")
def standin() -> Iterator[OllamaStandIn]:
    with OllamaStandIn(HeldOnCue(fallback=script)) as server:
        yield server


def started(root: Path, standin: OllamaStandIn, extra: str = "") -> DaemonProcess:
    daemon = DaemonProcess(root, standin.url)
    daemon.write_config("max_concurrent = 6", extra)
    return daemon.start()


def spec(prompt: str) -> AgentSpec:
    """The task of ``prompt``: in a sandbox when it says "in a box"."""
    isolation = "sandbox" if "in a box" in prompt else "default"
    return AgentSpec(input=prompt, agent="orchestrator", tools=("calculator",), isolation=isolation)


def run_all(daemon: DaemonProcess, prompts: list[str]) -> list[TaskInfo]:
    ids = [daemon.client.submit(spec(p)).id for p in prompts]
    return [daemon.client.wait(task_id, timeout=300) for task_id in ids]


def comparable(info: TaskInfo) -> dict[str, Any]:
    """What a run's result says, less what differs from run to run: durations
    (the run's, its tool calls', its sandbox's) and tool call ids."""
    result = dict(info.result or {})
    result.pop("duration_s", None)
    result["tool_results"] = [
        {k: v for k, v in r.items() if k not in ("call_id", "latency_s")}
        for r in result.get("tool_results", [])
    ]
    metadata = dict(result.get("metadata") or {})
    if "sandbox" in metadata:
        metadata["sandbox"] = {k: v for k, v in metadata["sandbox"].items() if k != "duration_s"}
    result["metadata"] = metadata
    return {"state": info.state, "reason": info.reason, "result": result}


def event_types(daemon: DaemonProcess, task_id: str) -> list[str]:
    return [e.event for e in daemon.client.logs(task_id)]


@pytest.mark.docker
def test_tasks_spread_over_both_nodes_as_they_run_locally(
    ray_cluster: RayCluster, standin: OllamaStandIn, isolated_dirs: Path
) -> None:
    require(not engine_problem(), engine_problem())  # some of the tasks are sandboxed
    local = started(isolated_dirs, standin)
    try:
        expected = {
            p: (comparable(i), event_types(local, i.id))
            for p, i in zip(PROMPTS, run_all(local, list(PROMPTS)), strict=True)
        }
        assert all(i.node == "local" for i in local.client.list_tasks())
    finally:
        local.terminate()

    remote = started(isolated_dirs, standin, ray_config(ray_cluster))
    try:
        prompts = [PROMPTS[i % len(PROMPTS)] for i in range(TASKS)]
        began = time.monotonic()
        done = run_all(remote, prompts)
        wall = time.monotonic() - began
        for prompt, info in zip(prompts, done, strict=True):
            want_result, want_events = expected[prompt]
            assert comparable(info) == want_result, remote.log_text()
            # The same events in the same order, with where it ran said once.
            types = event_types(remote, info.id)
            assert types.count("task_placed") == 1
            types.remove("task_placed")
            assert types == want_events
        # Sandboxed tasks ask for a docker engine: only node B has one.
        boxed = {info.node for p, info in zip(prompts, done, strict=True) if "in a box" in p}
        assert boxed == {ray_cluster.node_b}, boxed
        nodes = {info.node for info in done}
        assert nodes <= {ray_cluster.node_a, ray_cluster.node_b}, nodes
        assert nodes == {ray_cluster.node_a, ray_cluster.node_b}, "both nodes ran tasks"
        shown = subprocess.run(
            [sys.executable, "-m", "jarvisd", "task", "show", "--json", done[0].id],
            capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        assert json.loads(shown.stdout)["node"] == done[0].node
        print(f"{TASKS} tasks on the Ray cluster in {wall:.1f} s")

        # A task no node can run is refused at submit, saying what it asked for.
        with pytest.raises(UsageError, match=r"no node of the Ray cluster \(3 live\) has"):
            remote.client.submit(AgentSpec(input="x", engine="llamacpp", model="absent-1b"))
    finally:
        remote.terminate()


def node_containers(cluster: RayCluster) -> list[str]:
    """Sandbox containers started by the task workers on the cluster's nodes."""
    from jarvisd._config import Config
    from jarvisd.sandbox import LABEL, connect
    from jarvisd.sandbox._policy import OWNER_LABEL

    owners = {f"{socket.gethostname()}:{pid}" for pid in cluster.workers()}
    client = connect(Config())
    try:
        found = client.api.containers(all=True, filters={"label": f"{LABEL}=1"})
    finally:
        client.close()
    return [c["Id"] for c in found if (c.get("Labels") or {}).get(OWNER_LABEL) in owners]


def container_gone(container: str) -> bool:
    from jarvisd._config import Config
    from jarvisd.sandbox import LABEL, connect

    client = connect(Config())
    try:
        found = client.api.containers(all=True, filters={"label": f"{LABEL}=1"})
    finally:
        client.close()
    return container not in {c["Id"] for c in found}


@pytest.mark.docker
def test_cancel_reaches_the_worker_and_its_container_on_its_node(
    ray_cluster: RayCluster, standin: OllamaStandIn, isolated_dirs: Path
) -> None:
    require(not engine_problem(), engine_problem())
    daemon = started(isolated_dirs, standin, ray_config(ray_cluster))
    try:
        # Both at once: one on the host of its node, one in a sandbox there (node B).
        tasks = [
            daemon.client.submit(AgentSpec(input="a slow one")).id,
            daemon.client.submit(AgentSpec(input="a slow one in a box", isolation="sandbox")).id,
        ]
        placed = (ray_cluster.node_a, ray_cluster.node_b)
        daemon.wait_for(
            lambda: all(
                daemon.client.show(t).node in placed and "inference_start" in event_types(daemon, t)
                for t in tasks
            ),
            120,
            "both tasks on a node, asking their model",
        )
        [container] = node_containers(ray_cluster)
        began = time.monotonic()
        for task in tasks:
            daemon.client.cancel(task)
        daemon.wait_for(lambda: container_gone(container), 60, "its container removed")
        removed = time.monotonic() - began
        for task in tasks:
            info = daemon.client.wait(task, timeout=120)
            assert info.state == "cancelled", info
            assert info.node in placed
        # Their workers on the nodes have ended with them.
        daemon.wait_for(lambda: not ray_cluster.workers(), 30, "the remote workers to end")
        print(f"cancel to the container's removal on node B: {removed:.2f} s")
    finally:
        daemon.terminate()


def test_a_daemon_killed_mid_run_ends_its_remote_workers_and_resumes_their_tasks(
    ray_cluster: RayCluster, standin: OllamaStandIn, isolated_dirs: Path
) -> None:
    HeldOnCue.release.clear()
    daemon = started(isolated_dirs, standin, ray_config(ray_cluster))
    try:
        ids = [daemon.client.submit(AgentSpec(input=f"held again {i}")).id for i in range(2)]
        placed = (ray_cluster.node_a, ray_cluster.node_b)
        daemon.wait_for(
            lambda: all(
                daemon.client.show(i).node in placed and "inference_start" in event_types(daemon, i)
                for i in ids
            ),
            180,
            "both tasks on a node, asking their model",
        )
        daemon.kill9()
        # Its relays lose their stdin: the workers on the nodes end, none runs on alone.
        daemon.wait_for(lambda: not ray_cluster.workers(), 60, "the remote workers to end")
        daemon.start()
        HeldOnCue.release.set()
        done = [daemon.client.wait(i, timeout=180) for i in ids]
        assert [d.state for d in done] == ["succeeded"] * 2, [(d.state, d.reason) for d in done]
        for info in done:
            types = event_types(daemon, info.id)
            assert info.attempts == 2 and types.count("task_resumed") == 1, types
            assert info.node in placed
    finally:
        HeldOnCue.release.set()
        daemon.terminate()


def drivers(daemon: DaemonProcess) -> list[psutil.Process]:
    """The daemon's Ray driver processes (its children running ``_driver``)."""
    assert daemon.proc is not None
    return [
        p
        for p in psutil.Process(daemon.proc.pid).children()
        if "jarvisd.cluster._driver" in p.cmdline()
    ]


def placed(daemon: DaemonProcess, task_id: str) -> list[dict[str, Any]]:
    return [dict(e.data) for e in daemon.client.logs(task_id) if e.event == "task_placed"]


def test_one_driver_carries_the_tasks_on_warm_actors_and_is_restarted_when_it_dies(
    ray_cluster: RayCluster, standin: OllamaStandIn, isolated_dirs: Path
) -> None:
    HeldOnCue.release.clear()
    daemon = started(isolated_dirs, standin, ray_config(ray_cluster))
    try:
        # One after the other: the second runs on the first one's actor, still up, and
        # both through the one driver the first task started.
        first, second = (
            daemon.client.wait(daemon.client.submit(AgentSpec(input="name a tree")).id, 120)
            for _ in range(2)
        )
        assert [first.state, second.state] == ["succeeded"] * 2, (first, second)
        assert [p["warm"] for p in placed(daemon, first.id)] == [False]
        assert [p["warm"] for p in placed(daemon, second.id)] == [True]
        assert second.node == first.node
        [driver] = drivers(daemon)
        socket_path = driver.cmdline()[-1]
        assert Path(socket_path).parent.stat().st_mode & 0o077 == 0  # this user's alone

        # The driver killed mid-run: its task is settled as interrupted and resumed from
        # its checkpoint through a new driver.
        task = daemon.client.submit(AgentSpec(input="held by the driver")).id
        daemon.wait_for(
            lambda: "inference_start" in event_types(daemon, task), 120, "its model call"
        )
        driver.kill()
        daemon.wait_for(
            lambda: "task_resumed" in event_types(daemon, task), 120, "the task resumed"
        )
        HeldOnCue.release.set()
        info = daemon.client.wait(task, timeout=120)
        assert info.state == "succeeded" and info.attempts == 2, (info.state, info.reason)
        assert len(placed(daemon, task)) == 2
        [again] = drivers(daemon)
        assert again.pid != driver.pid
        # The killed one's private socket directory went with it.
        assert not Path(socket_path).parent.exists()
    finally:
        HeldOnCue.release.set()
        daemon.terminate()


# Last in the module: it takes a node away.
@pytest.mark.docker
def test_a_node_removed_mid_run_loses_no_task_and_runs_none_twice(
    ray_cluster: RayCluster, standin: OllamaStandIn, isolated_dirs: Path
) -> None:
    from ray.cluster_utils import Cluster

    require(not engine_problem(), engine_problem())
    cluster = ray_cluster.handle
    assert isinstance(cluster, Cluster)
    HeldOnCue.release.clear()
    daemon = started(isolated_dirs, standin, ray_config(ray_cluster))
    inner_before = HeldOnCue.asked.count("inner question")
    try:
        # One with a tool call (the llm tool, itself a model call, held) in flight, in a
        # sandbox (so on node B, the one with docker); three held at their first model
        # call, before any tool.
        spec_llm = AgentSpec(
            input="use llm", agent="orchestrator", tools=("llm",), isolation="sandbox"
        )
        llm = [daemon.client.submit(spec_llm).id]
        held = [daemon.client.submit(AgentSpec(input=f"held {i}")).id for i in range(3)]
        placed = (ray_cluster.node_a, ray_cluster.node_b)

        def all_waiting() -> bool:
            return all(
                daemon.client.show(i).node in placed and "inference_start" in event_types(daemon, i)
                for i in held
            ) and all("tool_call_start" in event_types(daemon, i) for i in llm)

        daemon.wait_for(all_waiting, 180, "every task on a node, waiting for its model")
        # The node of the tool call in flight goes away, and with it the worker that
        # would have removed the call's sandbox container.
        gone = daemon.client.show(llm[0]).node
        assert gone == ray_cluster.node_b
        containers = node_containers(ray_cluster)
        assert containers, "the sandboxed task's container"
        [other] = [n for n in placed if n != gone]
        on_gone = {i for i in llm + held if daemon.client.show(i).node == gone}
        assert on_gone - set(llm), "tasks are spread over both nodes"
        [node] = [n for n in cluster.worker_nodes if n.node_id == gone]
        cluster.remove_node(node)
        # Its tasks before a tool are settled as interrupted, resumed, placed on the other.
        resumed = on_gone - set(llm)
        daemon.wait_for(
            lambda: all(daemon.client.show(i).node == other for i in resumed),
            180,
            "its tasks on the node left",
        )
        HeldOnCue.release.set()
        done = {i: daemon.client.wait(i, timeout=180) for i in llm + held}
        for task_id, info in done.items():
            types = event_types(daemon, task_id)
            assert types.count("task_end") == 1, types
            assert types.count("tool_call_start") <= 1, types  # no tool ever ran twice
            if task_id in llm and task_id in on_gone:
                # Its tool call was in flight: marked, never run again.
                assert info.state == "interrupted", (info.state, info.reason)
                assert "effect unverified" in info.reason
                assert info.attempts == 1
                continue
            assert info.state == "succeeded", (task_id, info.state, info.reason)
            lost = task_id in on_gone
            assert info.attempts == (2 if lost else 1), (task_id, types)
            assert types.count("task_resumed") == (1 if lost else 0), types

        # The llm tool's model call was asked once: not replayed.
        assert HeldOnCue.asked.count("inner question") - inner_before == 1
        daemon.wait_for(lambda: not ray_cluster.workers(), 30, "no worker left on any node")
        daemon.wait_for(lambda: all(container_gone(c) for c in containers), 60, "no container left")
    finally:
        HeldOnCue.release.set()
        daemon.terminate()
