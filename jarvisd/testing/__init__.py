"""Test helpers shipped with jarvis, for its own tests and its users'.

``OllamaStandIn`` is a protocol-faithful Ollama server (real HTTP on loopback, NDJSON
streaming, error bodies, tool calls) answering from a :class:`ScriptedEngine`::

    from jarvisd.engines import ScriptedEngine, reply
    from jarvisd.testing import OllamaStandIn

    engine = ScriptedEngine([reply("", ("calculator", {"expression": "2+2"})), reply("4")])
    with OllamaStandIn(engine) as standin:
        ollama.Client(host=standin.url).chat(model="scripted", messages=[...])

Script an ``EngineResponseError("boom", 500)`` to get an error body with status 500.
It is the same server as ``jarvis serve-model``, so it cannot drift from what users run;
``standin.requests`` lists the request bodies it parsed.

``FakeHost`` is a :class:`jarvisd.runs.Host` that returns scripted outcomes (or raises
scripted errors) without running anything: for code that takes a host.

``MeteredEngine`` spends tokens as a real engine does (its prompt as soon as a call
starts, at most ``max_tokens`` of reply, one token per streamed chunk) and adds up what
it spent in ``spent``: what a run's budget ledger is checked against.

``VendorStandIn`` is a cloud vendor's API (any dialect the gateway speaks) on loopback,
accepting one key and recording the key each request carried: the upstream of a
host-held credential (``[credentials.NAME]``) in tests.

``refuse_network()`` keeps a test on loopback: reaching or resolving any other host
raises :class:`NetworkRefused` (use it in an autouse fixture).
"""

from __future__ import annotations

from ..engines import ScriptedEngine, reply
from ._host import FakeHost
from ._metered import MeteredEngine
from ._network import NetworkRefused, refuse_network
from ._standin import OllamaStandIn
from ._vendor import VendorRequest, VendorStandIn

__all__ = [
    "FakeHost",
    "MeteredEngine",
    "NetworkRefused",
    "OllamaStandIn",
    "ScriptedEngine",
    "VendorRequest",
    "VendorStandIn",
    "refuse_network",
    "reply",
]
