"""Run traces in SQLite: ``TraceCollector(...).attach(run.bus)``; ``jarvis trace``."""

from ._collector import (
    MAX_EVENT_BYTES,
    MAX_TRACE_BYTES,
    Trace,
    TraceCollector,
    TraceStore,
    default_trace_path,
)
from ._mermaid import to_mermaid

__all__ = [
    "MAX_EVENT_BYTES",
    "MAX_TRACE_BYTES",
    "Trace",
    "TraceCollector",
    "TraceStore",
    "default_trace_path",
    "to_mermaid",
]
