"""Managing an Ollama server's models with the official ``ollama`` client: what
``jarvis models list/pull/show/rm --engine ollama`` runs.

The client is imported here only, when such a command runs: the inference path keeps
its own lean HTTP code (``_ollama``), whose start-up cost is measured. Errors of the
client and of httpx are translated once, here, onto the jarvis tree.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

from .._errors import EngineError, EngineResponseError, EngineUnavailable, ModelNotFound
from ._ollama import DEFAULT_HOST, base_url

__all__ = ["OllamaModels"]

#: Seconds a management request may take between two bytes (a pull streams progress).
_TIMEOUT_S = 60.0


class OllamaModels:
    """The models of the Ollama server at ``host`` ("" : OLLAMA_HOST, else the default)."""

    def __init__(self, host: str = "") -> None:
        self.host = base_url(host or os.environ.get("OLLAMA_HOST") or DEFAULT_HOST)

    def _client(self) -> Any:
        import ollama

        return ollama.Client(host=self.host, timeout=_TIMEOUT_S)

    def list(self) -> list[dict[str, Any]]:
        """Each model: name, size in bytes, family, parameter size, quantization."""
        with self._translate(""), contextlib.closing(_Closing(self._client())) as client:
            listed = client.inner.list()
        return [
            {
                "name": m.model,
                "size": m.size or 0,
                "family": (m.details.family if m.details else "") or "",
                "parameter_size": (m.details.parameter_size if m.details else "") or "",
                "quantization": (m.details.quantization_level if m.details else "") or "",
            }
            for m in listed.models
        ]

    def show(self, name: str) -> dict[str, Any]:
        """What the server says of ``name``: details, model info, template, parameters."""
        with self._translate(name), contextlib.closing(_Closing(self._client())) as client:
            shown = client.inner.show(name)
        details = shown.details.model_dump() if shown.details else {}
        return {
            "name": name,
            "details": {k: v for k, v in details.items() if v not in (None, "", [])},
            "model_info": dict(shown.modelinfo or {}),
            "parameters": shown.parameters or "",
            "template": shown.template or "",
        }

    def pull(self, name: str, progress: Callable[[str], None]) -> None:
        """Pull ``name``, telling ``progress`` each status change and every tenth of a
        layer's download."""
        last: tuple[str, int] = ("", -1)
        with self._translate(name), contextlib.closing(_Closing(self._client())) as client:
            for update in client.inner.pull(name, stream=True):
                status = update.status or ""
                tenth = -1
                if update.total and update.completed is not None:
                    tenth = int(10 * update.completed / update.total)
                if (status, tenth) != last:
                    last = (status, tenth)
                    shown = f" {10 * tenth}%" if tenth >= 0 else ""
                    progress(f"{status}{shown}")

    def remove(self, name: str) -> None:
        with self._translate(name), contextlib.closing(_Closing(self._client())) as client:
            client.inner.delete(name)

    @contextlib.contextmanager
    def _translate(self, model: str) -> Iterator[None]:
        import httpx
        import ollama

        try:
            yield
        except ollama.ResponseError as exc:
            if exc.status_code == 404:
                raise ModelNotFound(
                    f"ollama at {self.host} has no model {model!r}"
                    + (f": run `jarvis models pull {model} --engine ollama`" if model else "")
                ) from exc
            raise EngineResponseError(
                f"ollama at {self.host}: {exc.error} (HTTP {exc.status_code})", exc.status_code
            ) from exc
        except (httpx.ConnectError, ConnectionError) as exc:
            raise EngineUnavailable(
                f"cannot reach Ollama at {self.host}: start it with `ollama serve` or set "
                "OLLAMA_HOST (or engine.ollama.host)"
            ) from exc
        except httpx.TimeoutException as exc:
            raise EngineUnavailable(f"ollama at {self.host} did not answer in time") from exc
        except httpx.HTTPError as exc:
            raise EngineError(f"ollama at {self.host}: {exc}") from exc


class _Closing:
    """Closes the client's connection pool when done (the client has no close())."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.inner._client.close()
