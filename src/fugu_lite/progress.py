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

    def __init__(self, console: Console) -> None:
        self.console = console
        self.bars: list[tuple[str, int]] = []  # (description, total)
        self.done: list[int] = []

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None

    def add_task(self, description: str, total: int, status: str = "") -> TaskID:
        self.bars.append((description, total))
        self.done.append(0)
        return TaskID(len(self.bars) - 1)

    def advance(self, bar: TaskID, advance: float = 1) -> None:
        self.update(bar, advance=int(advance))

    def update(self, bar: TaskID, advance: int = 1, status: str = "") -> None:
        description, total = self.bars[bar]
        before, self.done[bar] = self.done[bar], self.done[bar] + advance
        if total and self.done[bar] * self.STEPS // total > before * self.STEPS // total:
            noted = f" ({status})" if status else ""
            self.console.print(f"{description}: {self.done[bar]}/{total}{noted}")
