"""Evaluations of a model and engine on public benchmarks (``jarvis eval``)."""

from ._bfcl import (
    CATEGORIES,
    BfclCase,
    CategoryScore,
    jarvis_calls,
    load_cases,
    run_bfcl,
    score_case,
    tool_specs,
)

__all__ = [
    "CATEGORIES",
    "BfclCase",
    "CategoryScore",
    "jarvis_calls",
    "load_cases",
    "run_bfcl",
    "score_case",
    "tool_specs",
]
