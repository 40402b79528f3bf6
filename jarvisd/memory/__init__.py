"""Memory backends: text the agents can search (``retrieval`` tool, ``jarvis memory``)."""

from ._sqlite import MemoryHit, MemoryStore, default_memory_path

__all__ = ["MemoryHit", "MemoryStore", "default_memory_path"]
