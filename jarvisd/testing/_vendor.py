"""VendorStandIn: a cloud vendor's API on loopback, for host-held credentials.

It is jarvis's own inference gateway on TCP, answering from a scripted engine in
whatever dialect it is asked (Anthropic Messages, OpenAI Responses and chat, Gemini;
streamed or not, with usage), whose only accepted key is the vendor key a test
chose: a request without it is refused with 401, as a vendor's would be. Every
request's method, path and the key it carried are kept in ``requests``.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..engines import Engine
    from ..gateway import Gateway
    from ..http import Request, Response

__all__ = ["VendorRequest", "VendorStandIn"]


@dataclass(frozen=True, slots=True)
class VendorRequest:
    method: str
    path: str
    #: The key it carried (``x-api-key``, ``Authorization: Bearer``, ``x-goog-api-key``).
    key: str
    headers: dict[str, str]
    query: dict[str, str]


class VendorStandIn:
    """``async with VendorStandIn(engine, key) as vendor:`` serves on ``vendor.url``."""

    def __init__(self, engine: Engine, key: str, *, max_tokens: int = 1 << 20) -> None:
        self.engine = engine
        self.key = key
        self.max_tokens = max_tokens
        self.requests: list[VendorRequest] = []
        self.url = ""
        self._gateway: Gateway | None = None

    async def __aenter__(self) -> VendorStandIn:
        from .._runcontext import RunContext
        from ..gateway import Gateway

        gateway = Gateway(self.engine, RunContext(), "vendor-model", max_tokens=self.max_tokens)
        gateway.token, gateway._token = self.key, self.key.encode()
        admit = gateway.admit

        def recording(request: Request) -> Response | None:
            headers = dict(request.headers)
            auth = headers.get("authorization", "")
            key = (auth[7:] if auth[:7].lower() == "bearer " else "") or headers.get(
                "x-api-key", headers.get("x-goog-api-key", "")
            )
            self.requests.append(
                VendorRequest(request.method, request.path, key, headers, dict(request.query))
            )
            return admit(request)

        gateway.admit = recording  # type: ignore[method-assign]
        await gateway.__aenter__()
        self._gateway = gateway
        assert gateway.url is not None
        self.url = gateway.url
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._gateway is not None:
            await self._gateway.aclose()
            self._gateway = None
