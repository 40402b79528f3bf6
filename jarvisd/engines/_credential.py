"""CredentialEngine: ``--engine NAME`` naming a ``[credentials.NAME]`` table.

It generates nothing itself. An external agent's inference gateway sees it and
forwards the agent's requests to the credential's upstream, in the agent's own
dialect, with the key the host holds (``jarvisd.gateway._upstream``): the agent's
container never holds the key. A built-in agent, which calls its engine directly, is
told so instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from .._config import CredentialConfig
from .._errors import UsageError
from .._messages import Generation, Message, SamplingOptions, ToolSpec
from ._base import DEFAULT_OPTIONS, Engine

__all__ = ["CredentialEngine"]


class CredentialEngine(Engine):
    """The run's engine when it names a host-held credential (no I/O, no key read)."""

    name: ClassVar[str] = "credential"

    def __init__(self, credential_name: str, credential: CredentialConfig, model: str = "") -> None:
        self.credential_name = credential_name
        self.name = f"credential:{credential_name}"  # type: ignore[misc]  # the outcome's engine
        self.credential = credential
        self.model = model or credential.model

    async def generate(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> Generation:
        raise UsageError(
            f"--engine {self.credential_name} is a host-held credential: it serves external "
            "agents (claude_code, claude, codex, opencode, gemini) through their gateway, "
            "not jarvis's own agents; give those a model engine (llamacpp, ollama, openai)"
        )

    def default_model(self) -> str:
        return self.model
