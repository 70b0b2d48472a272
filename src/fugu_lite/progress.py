"""Progress where rich cannot redraw its bars (stderr piped, a CI log): it draws them only
once the work is done, so a long run would say nothing until then."""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.progress import TaskID


class LineProgress:
    """The part of rich's Progress that fugu-lite uses, as lines: one per bar each time
    another tenth of its total is done, so a long run shows it is moving."""

    STEPS = 10

    def __init__(self, console: Console, label: str = "") -> None:
        self.console = console
        self.label = label  # a stage's bar names itself by its label ("SFT epochs")
        self.bars: list[tuple[str, int]] = []  # (description, total)
        self.done: list[int] = []
        self.status: list[str] = []

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None

    def add_task(
        self, description: str, total: int, completed: int = 0, status: str = ""
    ) -> TaskID:
        self.bars.append((self.label or description, total))
        self.done.append(completed)
        self.status.append(status)
        return TaskID(len(self.bars) - 1)

    def advance(self, bar: TaskID, advance: float = 1) -> None:
        self.update(bar, advance=int(advance))

    def update(
        self,
        bar: TaskID,
        advance: int = 0,
        completed: int | None = None,
        status: str | None = None,
    ) -> None:
        """As rich's: `completed` sets the count, `advance` adds to it, and a `status` (what
        is being done now) stays until another is given."""
        if status is not None:
            self.status[bar] = status
        description, total = self.bars[bar]
        before = self.done[bar]
        self.done[bar] = (before if completed is None else completed) + advance
        if total and self.done[bar] * self.STEPS // total > before * self.STEPS // total:
            noted = f" ({self.status[bar]})" if self.status[bar] else ""
            self.console.print(f"{description}: {self.done[bar]}/{total}{noted}")
