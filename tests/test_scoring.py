"""The grader dispatch: a task goes to its grader, and a grader that cannot run is an error."""

from __future__ import annotations

import asyncio

from conftest import graded, number_task

from fugu_lite.scoring import grade
from fugu_lite.scoring.common import without_thinking
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


def choice_task() -> Task:
    return Task(
        id="c", prompt="Who is tallest?\nA) Ann\nB) Bob\nC) Cy", answer="B", grader="choice",
        task="logic",
    )  # fmt: skip


def test_a_draft_answer_in_a_reasoning_models_thinking_is_not_graded() -> None:
    """Reasoning models (DeepSeek-R1 distills, Qwen3, QwQ, gpt-oss) think before they answer;
    the graders read only the answer after the thinking, in each form it comes in."""
    thinking = "<think>\nFirst guess: the answer is 7. Or is it? \\boxed{7}\n</think>\n\n"
    assert graded(number_task("12"), thinking + "The answer is 12.").score == 1.0
    assert graded(number_task("7"), thinking + "The answer is 12.").score == 0.0
    # the chat template opened the block: only its end is in the output
    assert graded(number_task("7"), "So it is 7...\n</think>\nAnswer: 12").score == 0.0
    assert graded(number_task("12"), "So it is 7...\n</think>\nAnswer: 12").score == 1.0
    # an empty block (Qwen3 with thinking off) leaves the answer as it is
    assert graded(number_task("12"), "<think>\n\n</think>\n\n12").score == 1.0
    draft = "<think>It could be (A) Ann. Answer: A</think>The answer is (B)."
    assert graded(choice_task(), draft).score == 1.0
    exact = Task(id="e", prompt="Capital of France?", answer="Paris", grader="exact", task="qa")
    assert graded(exact, "<think>Lyon? No.</think>\nParis").score == 1.0
    harmony = (
        "<|channel|>analysis<|message|>Maybe 7.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>12"
    )
    assert graded(number_task("12"), harmony).score == 1.0
    assert graded(number_task("7"), harmony).score == 0.0
    assert graded(number_task("12"), "<thinking>Maybe 7.</THINKING>\n12").score == 1.0
    assert graded(exact, "<|channel|>final<|message|>Paris<|return|>").score == 1.0
    # the judge is sent the answer alone, without the end of the thinking
    assert without_thinking("<think>Lyon? No.</think>\nParis") == "Paris"


def test_an_answer_cut_inside_its_thinking_has_no_answer() -> None:
    """A reasoning model stopped at max_tokens while thinking gave no answer: its draft
    ("the answer is 7") must not score as one."""
    cut = graded(number_task("7"), "<think>\nLet me see: the answer is 7. But check")
    assert cut.score == 0.0
    assert "stopped inside its thinking" in cut.detail
    harmony = graded(number_task("7"), "<|channel|>analysis<|message|>The answer is 7")
    assert harmony.score == 0.0 and "stopped inside its thinking" in harmony.detail
    # as llama.cpp may leave it, after the assistant's start token
    started = graded(number_task("7"), "<|start|>assistant<|channel|>analysis<|message|>It is 7")
    assert started.score == 0.0 and "stopped inside its thinking" in started.detail
    assert graded(choice_task(), "<think>B, surely. Answer: B").score == 0.0
    # the block opened as <thinking> (which a </thinking> closes) is cut inside it too
    thinking = graded(number_task("7"), "<thinking>\nThe answer is 7. But check")
    assert thinking.score == 0.0 and "stopped inside its thinking" in thinking.detail
    # also after a line break before its <think> (as some chat templates leave it)
    led = graded(number_task("7"), "\n\n<think>\nThe answer is 7. But check")
    assert led.score == 0.0 and "stopped inside its thinking" in led.detail


def test_invisible_characters_in_an_answer_are_not_read() -> None:
    """A zero-width space, word joiner or byte order mark in a reply (as some models and
    copied text carry) made "Answer: B\\u200b" no letter, "tac\\u200b." no match for tac and
    "1\\u200b4" the number 1."""
    assert graded(choice_task(), "Answer: \u200bB\u200b").score == 1.0
    assert graded(number_task("14"), "The answer is 1\u200b4.").score == 1.0
    assert graded(number_task("14"), "\ufeffThe answer is 14\u2060.").score == 1.0
    exact = Task(id="e", prompt="Capital of France?", answer="Paris", grader="exact", task="qa")
    assert graded(exact, "The answer is Paris\u200b.").score == 1.0
