"""Tools: the seam, the executor that survives local models' arguments, the built-ins
and the registry. Standard library only at import time."""

from ._args import ArgumentError, parse_arguments, validate_arguments
from ._base import BaseTool, current_run
from ._builtin import FileReadTool, LLMTool, RetrievalTool
from ._calculator import CalculatorError, CalculatorTool, evaluate
from ._dispatch import LoopGuard, ToolDispatcher, cancelled_result
from ._registry import BUILTIN_TOOLS, ToolRegistry, build_tools
from ._think import ThinkTool

__all__ = [
    "BUILTIN_TOOLS",
    "ArgumentError",
    "BaseTool",
    "CalculatorError",
    "CalculatorTool",
    "FileReadTool",
    "LLMTool",
    "LoopGuard",
    "RetrievalTool",
    "ThinkTool",
    "ToolDispatcher",
    "ToolRegistry",
    "build_tools",
    "cancelled_result",
    "current_run",
    "evaluate",
    "parse_arguments",
    "validate_arguments",
]
