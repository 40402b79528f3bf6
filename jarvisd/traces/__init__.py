"""Run traces in SQLite: ``TraceCollector(...).attach(run.bus)``; ``jarvis trace``."""

from ._collector import (
    MAX_EVENT_BYTES,
    MAX_TRACE_BYTES,
    Trace,
    TraceCollector,
    TraceStore,
    default_trace_path,
)

__all__ = [
    "MAX_EVENT_BYTES",
    "MAX_TRACE_BYTES",
    "Trace",
    "TraceCollector",
    "TraceStore",
    "default_trace_path",
]
