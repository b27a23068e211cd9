"""Help texts that read cleanly at any width.

Docstrings and option help are wrapped in the source at 100 columns; typer prints their line
breaks as they are (in the list of commands, and in every paragraph of a command's help after
the first), so at 80 columns a paragraph has short lines where the source lines ended. Here
every paragraph of every help text becomes one line, which the terminal then wraps to its
width. Paragraphs are separated by a blank line; one that starts with ``\\b`` (click's mark for
text kept as written, such as a list) is kept as it is.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from typer.core import TyperCommand, TyperGroup

__all__ = ["FlowedGroup", "flow_help", "flowed"]

_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")


def flowed(text: str | None) -> str | None:
    """``text`` (a docstring or an option's help) with the lines of each paragraph joined."""
    if not text:
        return text
    body = inspect.cleandoc(text).partition("\f")[0]
    return "\n\n".join(
        paragraph if paragraph.startswith("\b") else " ".join(paragraph.split())
        for paragraph in _PARAGRAPH_BREAK.split(body)
    )


def flow_help(command: TyperCommand | TyperGroup) -> None:
    """Flow the help of ``command``, of its parameters and, for a group, of every command
    under it."""
    command.help = flowed(command.help)
    for param in command.params:
        if getattr(param, "help", None):
            param.help = flowed(param.help)  # type: ignore[attr-defined]
    if isinstance(command, TyperGroup):
        for sub in command.commands.values():
            if isinstance(sub, (TyperCommand, TyperGroup)):
                flow_help(sub)


class FlowedGroup(TyperGroup):
    """The ``carbonlite`` group: typer builds it with every command under it, whose help texts
    it then flows (:func:`flow_help`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        flow_help(self)
