"""Run traces in SQLite: ``TraceCollector(...).attach(run.bus)``; ``jarvis trace``."""

from ._collector import Trace, TraceCollector, TraceStore, default_trace_path

__all__ = ["Trace", "TraceCollector", "TraceStore", "default_trace_path"]
