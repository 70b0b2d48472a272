"""The grader dispatch: a task goes to its grader, and a grader that cannot run is an error."""

from __future__ import annotations

import asyncio

from conftest import graded, number_task

from fugu_lite.scoring import grade
from fugu_lite.tasks import Task


def test_a_grader_that_cannot_run_records_an_error() -> None:
    no_answer = Task.model_construct(
        id="x", prompt="2+2?", answer=None, grader="number", task="math", case_sensitive=False
    )
    assert graded(no_answer, "4").error == "the task's answer None is not a number"
    unknown = Task.model_construct(id="x", prompt="?", answer="4", grader="vibes", task="math")
    assert graded(unknown, "4").score is None
    bad_output = asyncio.run(grade(number_task("4"), None))
    assert bad_output.score is None
    assert "expected the worker's output as text" in (bad_output.error or "")
