"""User strings (worker ids, task names, prompts, paths) as a terminal should show them."""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Iterable

from rich.console import Console
from rich.markup import escape


def console_text(text: str) -> str:
    """`text` for a rich console: markup escaped (`qwen[awq]`), and control characters but
    line breaks shown as escapes: an ESC in a worker id would otherwise reach the terminal
    and restyle it."""
    return escape("\n".join(visible_controls(line) for line in text.splitlines()))


def console_name(text: str) -> str:
    """A worker id, task name or record id for a rich console, on one line: markup escaped
    and every control character, line breaks too, shown as an escape (`\\n`, `\\x1b`), so a
    name holding a newline does not read as two rows or two names."""
    return escape(visible_controls(text))


def names_line(names: Iterable[str]) -> str:
    """Worker ids (or task names) for a message, comma-separated, each with its control
    characters shown as escapes: a newline in one would split a one-line `error:` in two."""
    return ", ".join(visible_controls(name) for name in names)


def visible_controls(text: str) -> str:
    """Control characters (an escape sequence's ESC, a NUL, a tab) as `\\x1b`-style text."""
    return "".join(
        ascii(char)[1:-1] if unicodedata.category(char) == "Cc" else char for char in text
    )


def one_or_many(count: int, one: str, many: str) -> str:
    """The word (or words) agreeing with `count`: `one` for exactly 1, else `many`."""
    return one if count == 1 else many


def exact_number(value: float) -> str:
    """A number as the user typed it, every digit kept (1000001, 0.1234567, 1e+39, 0), where
    :g rounds to 6 significant digits: "up to 1,000,000, got 1e+06" for 1000001."""
    return repr(float(value)).removesuffix(".0")


def usd(amount: float) -> str:
    """An amount of US dollars as people write it: cents from a dollar up ($1,234.50), two
    significant digits below ($0.0012), never in e-notation ("1.2e+02" reads as 1.2)."""
    return f"${cost_text(amount)}"


def cost_text(cost: float) -> str:
    """A cost in the records' own unit (USD for most datasets, tokens for ZeroEval without
    prices, so no $) written as usd() writes dollars: 1,234.50, 0.0012, never 1.2e-05."""
    if cost == 0 or not math.isfinite(cost):
        return f"{cost:g}"
    if abs(cost) >= 1:
        return f"{cost:,.2f}"
    decimals = max(2, 1 - math.floor(math.log10(abs(cost))))
    return f"{cost:.{decimals}f}"


def notes_console() -> Console:
    """A console for what a command says on the way (progress, notes, warnings, errors): on
    stderr, so stdout holds only its result, and each message on one line however narrow
    the terminal or pipe (a log's reader greps whole lines; rich would fold at 80 columns)."""
    return Console(stderr=True, soft_wrap=True)


def results_console() -> Console:
    """A console for a command's result on stdout (`eval`'s tables and notes, `route`'s
    decision, `data stats`): each sentence on one line however narrow the terminal or pipe,
    as notes_console's (piped, rich folds at 80 columns: `eval > report.txt` cut a note or a
    path in two)."""
    return Console(soft_wrap=True)
