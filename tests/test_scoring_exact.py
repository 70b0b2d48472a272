"""The exact and regex graders on good, bad and adversarial real-looking outputs."""

from __future__ import annotations

import time

import pytest
from conftest import LINEAR_CPU_S, WHO_IS_TALLER, graded

from fugu_lite.task_families.lists import list_regex
from fugu_lite.tasks import Task


def exact_task(answer: str, case_sensitive: bool = False) -> Task:
    return Task(
        id="e",
        prompt="Reverse 'hello'.",
        answer=answer,
        grader="exact",
        task="string",
        case_sensitive=case_sensitive,
    )


@pytest.mark.parametrize(
    "output",
    [
        "olleh",
        "  Olleh.  ",
        '"olleh"',
        "`olleh`",
        "**olleh**",
        "Answer: olleh",
        "The answer is 'olleh'.",
        "olleh\n\nReversing the letters h-e-l-l-o gives this word.",
        "Reversing h, e, l, l, o one letter at a time:\nolleh",
        "The word 'hello' reversed is 'olleh'.",
        "Reversed, it is: olleh",
        r"\boxed{olleh}",
        r"The reversed word is \boxed{\text{olleh}}",
        r"\fbox{olleh}",
        r"\boxed{olleh",  # a box cut off at the token limit
        "<think>hello backwards</think>\n<answer>olleh</answer>",
        "- olleh",  # a markdown bullet or quote
        "> olleh",
        "• olleh",
        "Sure! Here is the reversed word:\n\n- olleh",
        "> **Answer:** olleh",
        "The answer is ｏｌｌｅｈ.",  # full-width letters (NFKC)
        "Final answer olleh",  # a marker without its colon
        "**Final answer** olleh",  # a bold label without its colon
        "__Final Answer__ olleh",
        "Reversing h-e-l-l-o.\n\n**Final answer** olleh",
        "**Answer** — olleh",
    ],
)
def test_exact_grader_normalises(output: str) -> None:
    result = graded(exact_task("olleh"), output)
    assert result.score == 1.0, result.detail


@pytest.mark.parametrize(
    "output",
    [
        "hello",
        "olle h",
        "olleh olleh",
        "The word is olleh and also hello",
        "The word 'olleh' reversed is 'hello'.",
        "",
    ],
)
def test_exact_grader_rejects(output: str) -> None:
    assert graded(exact_task("olleh"), output).score == 0.0


def test_an_article_is_part_of_an_exact_answer() -> None:
    """Normalising drops no article: the first two words of "the big red dog" are not "big"."""
    task = Task(
        id="e",
        prompt="What are the first two words of 'the big red dog'?",
        answer="the big",
        grader="exact",
        task="string",
    )
    assert graded(task, "The answer is: the big").score == 1.0
    assert graded(task, "The answer is: big").score == 0.0


@pytest.mark.parametrize(
    "output",
    [
        "The answer is cta, not 'olleh'.",
        "olleh\nWait, actually the answer is ollhe",
        "Answer: ollhe\n\nThe word 'hello' backwards is NOT 'olleh'.",
        "**olleh** is wrong; the answer is: ollhe",
        "Input: 'olleh'\nOutput: ollhe",
        "olleh\n\nWait, no, it's ollhe.",  # a self-correction is the answer
        'olleh\n\nHmm, let me reconsider: actually it is "ollhe".',
        "“olleh”的反转？答案是ollhe。",
        # a label without its colon gives the last answer
        "The answer is olleh.\n\n**Final answer** ollhe",
        "The answer is olleh.\nFinal answer ollhe",
    ],
)
def test_an_explicit_wrong_answer_is_not_saved_by_text_elsewhere(output: str) -> None:
    assert graded(exact_task("olleh"), output).score == 0.0


@pytest.mark.parametrize(
    "output",
    [
        "**Answer**: olleh",
        "The answer is: **olleh** because the letters run the other way.",
        "The answer is olleh. Reversing h-e-l-l-o gives it.",
        "The answer is simple: reverse the letters.\nolleh",
        "The answer is the word reversed, so the answer is olleh",
        "Answer:\n\n`olleh`\n",
        "```text\nolleh\n```",
        "The answer is:\n```\nolleh\n```",
        "Answer:\n```text\nolleh\n```\nDone.",
        "ollhe\n\nWait, no, it's olleh.",
        "The answer is ollhe. Wait, it should be olleh.",
        "Sorry, I meant olleh.",
        # the earlier answer said to be wrong, then the answer (these read ollhe before)
        "The answer is ollhe. That's wrong; it is olleh.",
        "The answer is ollhe. That seems wrong. It is olleh.",
        "The answer is ollhe. I made a mistake; it is olleh.",
        "Actually, it's simple: reverse the letters.\nolleh",
        "答案是olleh。",  # "the answer is" in Chinese (no match before)
        "把字母倒过来写，答案：olleh",
    ],
)
def test_exact_grader_reads_a_marked_or_fenced_answer(output: str) -> None:
    result = graded(exact_task("olleh"), output)
    assert result.score == 1.0, result.detail


@pytest.mark.parametrize(
    ("output", "score"),
    [
        ("Reversed: olleh", 1.0),
        ("h-e-l-l-o -> o-l-l-e-h → olleh", 1.0),
        ("o + l + l + e + h = olleh", 1.0),
        ("**Reversed word:** olleh", 1.0),
        ("__Reversed:__ olleh", 1.0),
        ("The answer is: o+l+l+e+h = olleh", 1.0),
        ("reverse(hello) == olleh", 0.0),  # a comparison, not a result
        ("olleh = ollhe", 0.0),
        ("The answer is: h, e, l, l, o → olleh", 1.0),
        ("olleh: no wait, ollhe", 0.0),
        ("Reversed: ollhe", 0.0),
    ],
)
def test_exact_grader_reads_the_text_after_a_label_or_arrow(output: str, score: float) -> None:
    assert graded(exact_task("olleh"), output).score == score


def test_text_quoted_from_the_question_is_not_a_quoted_answer() -> None:
    task = Task(
        id="f",
        prompt="Which is a fruit: 'chair' or 'apple'?",
        answer="apple",
        grader="exact",
        task="words",
    )
    assert graded(task, "Is it 'chair' or 'apple'? Hard to say.").score == 0.0
    assert graded(task, "Which is a fruit: 'chair' or 'apple'?\nchair").score == 0.0
    assert graded(task, "The fruit is 'apple'.").score == 1.0
    assert graded(task, "**apple**").score == 1.0


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        ("olleh", "The answer is olleh (o-l-l-e-h).", 1.0),
        ("olleh", "olleh (hello reversed)", 1.0),
        ("o", "o (as in hello)", 1.0),
        ("olleh", "**olleh** (o-l-l-e-h)", 1.0),
        # a note that may take the answer back or give another
        ("ollhe", "ollhe (no wait, olleh)", 0.0),
        ("olleh", "olleh (or maybe ollhe)", 0.0),
        ("ollhe", "ollhe (the answer is olleh)", 0.0),
    ],
)
def test_exact_grader_reads_an_answer_before_a_closing_note(
    answer: str, output: str, score: float
) -> None:
    result = graded(exact_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


def test_a_minus_sign_is_no_bullet() -> None:
    assert graded(exact_task("-5"), "-5").score == 1.0
    assert graded(exact_task("5"), "-5").score == 0.0
    assert graded(exact_task("-5"), "- 5").score == 0.0


def test_exact_grader_takes_linear_time_on_a_long_run_of_bullets() -> None:
    started = time.process_time()
    assert graded(exact_task("olleh"), "- > " * 200_000 + "olleh").score == 1.0
    assert time.process_time() - started < LINEAR_CPU_S


def test_exact_grader_takes_linear_time_on_trailing_punctuation() -> None:
    started = time.process_time()
    assert graded(exact_task("olleh"), "olleh" + " ." * 400_000).score == 1.0
    assert time.process_time() - started < LINEAR_CPU_S


def test_exact_grader_case_sensitivity() -> None:
    assert graded(exact_task("TREE", case_sensitive=True), "TREE").score == 1.0
    assert graded(exact_task("TREE", case_sensitive=True), "tree").score == 0.0
    assert graded(exact_task("tree", case_sensitive=True), "TREE (the word)").score == 0.0
    assert graded(exact_task("TREE"), "tree").score == 1.0
    assert graded(exact_task("Straße"), "STRASSE").score == 1.0  # case folded, not lowered
    assert graded(exact_task("hello world"), "Answer: hello\tworld").score == 1.0


def regex_task(pattern: str, case_sensitive: bool = False) -> Task:
    return Task(
        id="r",
        prompt="Sort [3, 1, 2].",
        answer=pattern,
        grader="regex",
        task="list",
        case_sensitive=case_sensitive,
    )


def test_regex_grader_searches_collapsed_output() -> None:
    sorted_list = r"(?<![\d.-])\[?\s*1(?:\s*[,;]\s*|\s+)2(?:\s*[,;]\s*|\s+)3\s*\]?(?![\d.])"
    assert graded(regex_task(sorted_list), "The sorted list is [1, 2, 3].").score == 1.0
    assert graded(regex_task(sorted_list), "1 2\n 3").score == 1.0
    assert graded(regex_task(r"\[1, 2, 3\]"), "The sorted list is [1,\n  2, 3].").score == 1.0
    assert graded(regex_task(sorted_list), "[3, 1, 2]").score == 0.0
    assert graded(regex_task(sorted_list), "[11, 2, 3]").score == 0.0
    assert graded(regex_task(sorted_list.replace("1", "-1")), "[\u22121, 2, 3]").score == 1.0
    long_reply = "Let me sort the list step by step. " * 1000 + "Sorted: [1, 2, 3]"
    assert graded(regex_task(sorted_list), long_reply).score == 1.0  # the answer is at the end
    assert graded(regex_task(r"^yes$"), "Yes").score == 1.0
    assert graded(regex_task(r"^yes$"), "yes, because").score == 0.0
    assert graded(regex_task(r"^yes$", case_sensitive=True), "Yes").score == 0.0


SORTED_123 = r"(?<![\d.-])\[?\s*1(?:\s*[,;]\s*|\s+)2(?:\s*[,;]\s*|\s+)3\s*\]?(?![\d.])"


@pytest.mark.parametrize(
    ("output", "score"),
    [
        # an earlier right list is not the answer the reply settles on
        ("Sorted: [1, 2, 3]. Wait, let me double check. Final answer: [1, 3, 2]", 0.0),
        ("The answer is [1, 2, 3]? Let me check again. The answer should be [1, 3, 2].", 0.0),
        ("First try: 1, 2, 3? No.\n\n**Answer:** [3, 2, 1]", 0.0),
        ("The final answer is [1, 2, 3].", 1.0),
        ("**Final Answer:** $[1, 2, 3]$", 1.0),
        ("Final Answer: The final answer is $1, 2, 3$. I hope it is correct.", 1.0),
        ("The answer is:\n\n[1, 2, 3]\n\nExplanation: 1 moves to the front.", 1.0),
        # a marker with no text after it, or a remark on an answer given before
        ("[1, 2, 3]\n\nThis is my final answer.", 1.0),
        ("[1, 2, 3]\n\nThe answer is correct because each number is smaller than the next.", 1.0),
        ("Answer: [1, 2, 3]. The answer is correct.", 1.0),
        # the answer ends with its sentence or line: the explanation after it is not graded
        ("The answer is [3, 2, 1]. That is the list [1, 2, 3] in reverse.", 0.0),
        ("Final answer: [3, 2, 1]\n\nExplanation: sorting gives [1, 2, 3] ascending.", 0.0),
        ("Final answer: [1, 2, 3]\n\nExplanation: 3 moves to the end.", 1.0),
        ("The answer is as follows:\n[1, 2, 3]", 1.0),
        ("The answer is:\n\n```text\n[1, 2, 3]\n```", 1.0),
        ("Answer: [1,\n 2,\n 3]\n\nThe input was [3, 2, 1].", 1.0),
        ("The answer is [1.5, 2]. Then [1, 2, 3].", 0.0),
        # a bullet list is its items
        ("The answer is:\n- 1\n- 2\n- 3\n\nThe input was [3, 1, 2].", 1.0),
        ("Final answer:\n\n- 1\n- 3\n- 2", 0.0),
        # a self-correction is the final answer
        ("The answer is [1, 3, 2]. Wait, no, it's [1, 2, 3].", 1.0),
        ("The sorted list is [1, 2, 3]. Wait, no, it's [1, 3, 2].", 0.0),
        ("The answer is [1, 2, 3]. No wait, it's fine.", 1.0),
        # a retraction takes back the answers before it
        ("[1, 2, 3]? No wait: [1, 3, 2].", 0.0),
        ("The answer is [1, 3, 2]. Oops, I made a mistake: [1, 2, 3].", 1.0),
        ("[3, 1, 2]. Oops: [1, 2, 3]. Oops, I made a mistake: it is [2, 1, 3].", 0.0),  # the last
        ("The answer is [1, 2, 3]. Wait, actually [1, 3, 2].", 0.0),
        ("[1, 3, 2]\n\nNo wait, [1, 2, 3].", 1.0),
        ("Sorted: [1, 2, 3]? No: [1, 3, 2].", 0.0),
        ("The answer is [1, 2, 3]. No: [1, 3, 2].", 0.0),
        ("[1, 3, 2]? No, [1, 2, 3].", 1.0),
        ("[1, 2, 3]? No. It is fine.", 1.0),
        # a bare correction giving a list is the final answer when the list is its sentence
        ("[1, 2, 3]. Actually [1, 3, 2].", 0.0),
        ("[1, 2, 3]\n\nWait, [1, 3, 2].", 0.0),
        ("[1, 2, 3]. Hmm, actually, 1, 3, 2.", 0.0),
        ("Sorted: [1, 2, 3]. I mean [2, 1, 3]!", 0.0),
        ("[1, 3, 2]. Actually [1, 2, 3].", 1.0),
        ("[1, 2, 3]. Wait, [1, 2, 3] is right.", 1.0),
        ("[1, 2, 3]. There are actually [3, 2, 1] in the input.", 1.0),
        # an answer ruled out is no answer
        ("The answer is not [1, 2, 3].", 0.0),
        ("The answer is not [1, 2, 3], it is [1, 3, 2].", 0.0),
        ("The answer is not [1, 3, 2], it is [1, 2, 3].", 1.0),
        ("The answer is not [1, 3, 2]. It's [1, 2, 3].", 1.0),
    ],
)
def test_regex_grader_grades_the_final_answer(output: str, score: float) -> None:
    result = graded(regex_task(SORTED_123), output)
    assert (result.score, result.error) == (score, None), result.detail


def test_an_anchored_pattern_matches_the_answer_after_its_marker() -> None:
    assert graded(regex_task(r"^yes$"), "Answer: yes").score == 1.0
    assert graded(regex_task(r"^yes$"), "**Answer:** yes.").score == 1.0
    assert graded(regex_task(r"^yes$"), "Answer: yes, because").score == 0.0
    assert graded(regex_task(r"^yes$"), "Answer: yes. Because 5 is greater than 3.").score == 1.0
    assert graded(regex_task(r"^no$"), "**Answer:** No\n\n7 is not greater than 9.").score == 1.0
    assert graded(regex_task(r"^yes$"), "The answer is not no but yes.").score == 1.0
    assert graded(regex_task(r"^yes$"), '{"answer": "yes"}').score == 1.0  # the text, unquoted


def test_a_bullet_list_of_two_items_after_the_marker_is_its_items() -> None:
    sorted_12 = r"(?<![\d.-])\[?\s*1(?:\s*[,;]\s*|\s+)2\s*\]?(?![\d.])"
    task = regex_task(sorted_12).model_copy(update={"prompt": "Sort [2, 1]."})
    assert graded(task, "Final answer:\n- 1\n- 2\n\nThe input was [2, 1].").score == 1.0
    assert graded(task, "Final answer:\n- 2\n- 1\n\nSorted: [1, 2]").score == 0.0


@pytest.mark.parametrize(
    ("output", "score"),
    [
        ("3, 8, 15, and 22", 1.0),
        ("The answer is 3, 8, 15 and 22.", 1.0),
        ("**Sorted:** 3, 8, 15, and 22", 1.0),
        ("3, 8, 22, and 15", 0.0),
        ("3, 8, 15, and 22, and 40", 0.0),
        ("3, 8, and 15", 0.0),
    ],
)
def test_regex_grader_reads_a_list_whose_last_number_follows_and(output: str, score: float) -> None:
    """A generated sort task's pattern wants commas or spaces between the numbers; "and"
    before the last one is how people write a list."""
    result = graded(regex_task(list_regex([3, 8, 15, 22])), output)
    assert result.score == score, result.detail


@pytest.mark.parametrize(
    "output",
    [
        "Answer: " * 200_000 + "yes",
        "The answer is" + "*" * 200_000 + " yes",
        "answer:" + ":*" * 200_000 + " yes",
    ],
)
def test_regex_grader_takes_linear_time_on_repeated_markers(output: str) -> None:
    started = time.process_time()
    assert graded(regex_task(r"yes"), output).score == 1.0
    assert time.process_time() - started < LINEAR_CPU_S


@pytest.mark.parametrize(
    ("output", "score"),
    [
        ("### olleh", 1.0),
        ("## **olleh**", 1.0),
        ("olleh ✅", 1.0),
        ("olleh 🎉🎉", 1.0),
        ("$\\text{olleh}$", 1.0),
        ("$\\textbf{olleh}$", 1.0),
        ("\\(\\mathrm{olleh}\\)", 1.0),
        ("### hello", 0.0),
        ("olleh ✅\n\nWait, no, it's ollhe.", 0.0),
    ],
)
def test_exact_grader_ignores_a_heading_a_closing_emoji_and_latex_text(
    output: str, score: float
) -> None:
    result = graded(exact_task("olleh"), output)
    assert result.score == score, result.detail


def test_exact_grader_normalises_in_linear_time() -> None:
    started = time.process_time()
    assert graded(exact_task("olleh"), "olleh" + " ✅" * 200_000).score == 1.0
    assert graded(exact_task("olleh"), "$\\text{" * 100_000 + "olleh").score == 0.0
    assert time.process_time() - started < LINEAR_CPU_S


@pytest.mark.parametrize(
    ("output", "score"),
    [
        ("Reversing 'hello' gives us olleh.", 1.0),
        ("Read it from right to left: o, l, l, e, h. That gives olleh.", 1.0),
        ("It's olleh.", 1.0),
        ("I think it's olleh.", 1.0),
        ("olleh is the reversed word.", 1.0),
        ("OLLEH is the answer.", 1.0),
        ("olleh is my final answer.", 1.0),
        ("ollhe is my final answer.", 0.0),
        ("Reversing 'hello' gives us ollhe.", 0.0),
        ("It's ollhe.", 0.0),
        ("ollhe is the reversed word.", 0.0),
        # the answer, then the word it reverses
        ("'olleh' is 'hello' reversed", 1.0),
        ('"olleh" is "hello" spelled backwards.', 1.0),
        ("olleh is hello in reverse.", 1.0),
        ("'ollhe' is 'hello' reversed.", 0.0),
        ("olleh would be the answer.", 1.0),
        ("Reversing the word yields olleh", 1.0),
        ("Reversing the letters, you get olleh.", 1.0),  # "get" and "reads" state it too
        ("Read from the end, it reads olleh.", 1.0),
        ("Reversing the letters, you get ollhe.", 0.0),
        # a closing aside after the answer on its line: "which", "since", "as", "not"
        ("The reversed word is olleh, which reads hello backwards.", 1.0),
        ("The reversed word is olleh, which is hello spelled backwards.", 1.0),
        ("The reversed string is olleh, since we read h-e-l-l-o from the end.", 1.0),
        ("It is olleh, not hello.", 1.0),
        ("It is ollhe, not olleh.", 0.0),
        ("The reversed word is olleh, which is wrong; it is ollhe.", 0.0),
        ("I think it is olleh, as expected? No: ollhe.", 0.0),
        ("It becomes ollhe, which is not olleh.", 0.0),
        # a "not" in the aside saying what else the answer is not, or judging the answer
        ("The reversed word is olleh, which is not hello.", 1.0),
        ("The reversed string is olleh, since it is not a palindrome.", 1.0),
        ("It is olleh, not hello, since hello is not a palindrome.", 1.0),
        ("It is olleh, which is not right.", 0.0),
        ("It is olleh, which doesn't look right.", 0.0),
        ("It is olleh, which I'm not sure of.", 0.0),
        ("It is olleh, which is not it; ollhe.", 0.0),
        # a noun phrase after the answer: an appositive, not a clause stating another
        ("Reversed, it becomes olleh, the same letters in reverse.", 1.0),
        ("The reversed word is olleh, a made-up word.", 1.0),
        ("It is ollhe, the answer is olleh.", 1.0),
        ("It is olleh, the answer is ollhe.", 0.0),
        ("It is olleh, a typo for ollhe.", 0.0),
        ("It is olleh, an error for ollhe.", 0.0),
        ("It is olleh, the reversal gives ollhe.", 0.0),
        ("It is olleh, the fixed one: ollhe.", 0.0),
        # a box stated last is the answer, not a quoted text before it
        ("I first thought 'olleh'.\n\\fbox{ollhe}", 0.0),
        # an answer ruled out, then the answer
        ("The answer is not ollhe, it is olleh.", 1.0),
        ("The answer is not ollhe but olleh.", 1.0),
        ("The answer is not olleh, it's ollhe.", 0.0),
        # the comma after "rather" or "but" is no part of the answer
        ("The answer is not ollhe; rather, olleh.", 1.0),
        ("The answer is not ollhe, but, olleh.", 1.0),
        ("The answer is not olleh; rather, ollhe.", 0.0),
        ("The answer is not olleh.", 0.0),
        # a label ending its line, the answer on the next one, then a note
        ("The reversed word is:\n\nolleh\n\n(h-e-l-l-o backwards)", 1.0),
        ("**Reversed:**\n`olleh`\n\nI read the letters from the end.", 1.0),
        ("Reversed:\nollhe\n\nI read 'hello' from the end: olleh? No.", 0.0),
        ("Tried:\nolleh\nollhe\nFinal: ollhe", 0.0),
        # the answer named by its kind
        ("Reversed, 'hello' is the word 'olleh'.", 1.0),
        ("The result is the word olleh.", 1.0),
        ("Answer: the word **olleh**", 1.0),
        ("Reversed, 'hello' is the word ollhe.", 0.0),
        ("The result is the word ollhe, not olleh.", 0.0),
    ],
)
def test_exact_grader_reads_an_answer_stated_in_words(output: str, score: float) -> None:
    result = graded(exact_task("olleh"), output)
    assert result.score == score, result.detail


@pytest.mark.parametrize(
    ("output", "verb"),
    [
        ("Reversing the letters, you get olleh.", "get"),
        ("Read from the end, it reads olleh.", "reads"),
        ("Reversing 'hello' gives us olleh.", "gives us"),
        ("Reversed, it becomes the word olleh.", "becomes"),
        ("The reversed word is olleh, which reads hello backwards.", "is"),
        ("Answer:\nReversed, you get olleh", "get"),  # the line after a marker
    ],
)
def test_the_detail_names_the_verb_an_answer_was_read_after(output: str, verb: str) -> None:
    """A grade read after "get" says 'get', not 'is' (which the reply may not hold)."""
    result = graded(exact_task("olleh"), output)
    assert result.score == 1.0, result.detail
    assert f"after the last '{verb}'" in result.detail


@pytest.mark.parametrize(
    ("output", "score"),
    [
        ("olleh\n\nWait, actually ollhe.", 0.0),
        ("olleh\n\nActually, ollhe.", 0.0),
        ("olleh\n\nNo wait, ollhe.", 0.0),
        ("ollhe\n\nWait, actually olleh.", 1.0),
        ("ollhe\n\nNo wait, **olleh**!", 1.0),
        # a remark, not a correction: the answer stands
        ("olleh\n\nActually, this was easy.", 1.0),
        ("olleh\n\nActually, yes.", 1.0),
    ],
)
def test_exact_grader_follows_a_bare_correction(output: str, score: float) -> None:
    result = graded(exact_task("olleh"), output)
    assert result.score == score, result.detail


def test_exact_grader_does_not_read_quoted_text_said_to_be_wrong() -> None:
    assert graded(exact_task("olleh"), "'olleh' is wrong; it is ollhe.").score == 0.0
    assert graded(exact_task("olleh"), '"olleh" is incorrect.').score == 0.0
    assert graded(exact_task("olleh"), "'ollhe' is wrong, 'olleh' is right.").score == 1.0
    # candidates marked true or false: the one marked false, though last, is no answer
    assert graded(exact_task("olleh"), "Candidates: 'olleh' true, 'ollhe' false.").score == 1.0


def test_exact_grader_reads_a_letter_named_by_its_kind() -> None:
    prompt = "What is the last letter of the word 'banana'? Reply with only the result."
    task = Task(id="e", prompt=prompt, answer="a", grader="exact", task="strings")
    assert graded(task, "The last letter of the word banana is the letter a.").score == 1.0
    assert graded(task, 'The last letter is the letter "A".').score == 1.0
    assert graded(task, "The last letter of the word banana is the letter n.").score == 0.0
    assert graded(task, "The last letter is the letter n, not a.").score == 0.0


def test_exact_grader_reads_stated_answers_in_linear_time() -> None:
    started = time.process_time()
    for output in ["x" + " " * 200_000 + "y", "olleh" + " is" * 100_000, "gives us " * 100_000]:
        assert graded(exact_task("olleh"), output).score == 0.0
    assert time.process_time() - started < LINEAR_CPU_S


FIRST_LETTER = "What is the first letter of the word 'banana'?"
WHO_ARE_TALLER = "The twins are 170 cm tall and Bob is 160 cm tall. Who are taller?"


@pytest.mark.parametrize(
    ("prompt", "output", "answer", "score"),
    [
        (WHO_IS_TALLER, "Between Ann and Bob, Bob is taller.", "Bob", 1.0),
        (WHO_IS_TALLER, "Between Ann and Bob, Bob is taller.", "Ann", 0.0),
        (WHO_IS_TALLER, "Bob is taller than Ann.", "Bob", 1.0),
        (WHO_IS_TALLER, "Bob is taller than Ann.", "Ann", 0.0),
        (WHO_IS_TALLER, "Ann is not taller; Bob is.", "Ann", 0.0),
        (FIRST_LETTER, "b is the first letter.", "b", 1.0),
        (FIRST_LETTER, "The first letter is b, and a is the first vowel.", "a", 0.0),
        # a question on a line of its own after one without a full stop, and one asking "are"
        (
            "Ann: 150 cm, Bob: 160 cm\nWho is taller?",
            "Between Ann and Bob, Bob is taller.",
            "Bob",
            1.0,
        ),
        (WHO_ARE_TALLER, "Between the twins and Bob, the twins are taller.", "the twins", 1.0),
        ("Who is taller, Ann or Bob?", "Comparing them: Bob is taller.", "Bob", 1.0),
        ("Who is taller, Ann or Bob?", "Ann is 150 cm, hence Bob is taller.", "Bob", 1.0),
    ],
)
def test_exact_grader_reads_what_the_reply_says_is_what_the_question_asks(
    prompt: str, output: str, answer: str, score: float
) -> None:
    task = Task(id="e", prompt=prompt, answer=answer, grader="exact", task="logic")
    result = graded(task, output)
    assert result.score == score, result.detail


def test_regex_grader_keeps_the_answer_before_a_remark_starting_with_actually() -> None:
    task = Task(id="r", prompt="Sort [3, 1, 2].", answer=r"\[1, 2, 3\]", grader="regex", task="t")
    assert graded(task, "The answer is [1, 2, 3]. Actually 3 numbers are listed.").score == 1.0
    assert graded(task, "The answer is [3, 2, 1]. Actually 3 numbers are listed.").score == 0.0


SORT_LETTERS = (
    "Sort the letters of the word 'silver' in alphabetical order. Reply with only the result."
)
REVERSE_WORDS = (
    "Reverse the order of the words in: 'apple banana cherry'. Reply with only the result."
)
SALT_AND_PEPPER = "Reverse the order of the words in: 'salt and pepper'."


@pytest.mark.parametrize(
    ("prompt", "answer", "output", "score"),
    [
        (SORT_LETTERS, "eilrsv", "e, i, l, r, s, v", 1.0),
        (SORT_LETTERS, "eilrsv", "Sorted: e, i, l, r, s, v.", 1.0),
        (SORT_LETTERS, "eilrsv", "The sorted letters are e i l r s v.", 1.0),
        (SORT_LETTERS, "eilrsv", "e, i, l, s, r, v", 0.0),
        (SORT_LETTERS, "eilrsv", "e, i, l, r, s", 0.0),
        (SORT_LETTERS, "eilrsv", "e, i, l, r, s, v, x", 0.0),
        (SORT_LETTERS, "eilrsv", "e, i, l, r, s, and v", 1.0),
        (SORT_LETTERS, "eilrsv", "The sorted letters are e, i, l, r, s and v.", 1.0),
        (SORT_LETTERS, "eilrsv", "e, i, l, r, and s", 0.0),
        (
            "Arrange the letters of the word 'silver' in alphabetical order.",
            "eilrsv",
            "e, i, l, r, s, v",
            1.0,
        ),
        (REVERSE_WORDS, "cherry banana apple", "Reversed: cherry, banana, apple", 1.0),
        (REVERSE_WORDS, "cherry banana apple", "'cherry', 'banana', 'apple'", 1.0),
        (REVERSE_WORDS, "cherry banana apple", "Reversed: banana, cherry, apple", 0.0),
        (REVERSE_WORDS, "cherry banana apple", "cherry, banana, apple, pear", 0.0),
        (REVERSE_WORDS, "cherry banana apple", "Cherry, banana, and apple.", 1.0),
        (REVERSE_WORDS, "cherry banana apple", "Reversed: cherry, banana and apple", 1.0),
        (REVERSE_WORDS, "cherry banana apple", "cherry, apple, and banana", 0.0),
        (REVERSE_WORDS, "cherry banana apple", "cherry, banana, and", 0.0),
        (SALT_AND_PEPPER, "pepper and salt", "pepper, and, salt", 1.0),  # "and" a word asked
        (SALT_AND_PEPPER, "pepper and salt", "pepper, salt", 0.0),
        # a question asking no order of letters or words: the items stay as written
        ("Write the word 'cat' backwards.", "tac", "t, a, c", 0.0),
        ("Name the city and its country.", "Paris France", "Paris, France", 0.0),
    ],
)
def test_exact_grader_reads_ordered_letters_or_words_listed_one_by_one(
    prompt: str, answer: str, output: str, score: float
) -> None:
    task = Task(id="e", prompt=prompt, answer=answer, grader="exact", task="strings")
    result = graded(task, output)
    assert result.score == score, result.detail


@pytest.mark.parametrize(
    ("output", "score"),
    [
        ("t-o-b-o-r", 1.0),
        ("Backwards, 'robot' is T-O-B-O-R.", 1.0),
        ("**Answer:** t-o-b-o-r", 1.0),
        ("t-o-b-r-o", 0.0),
        ("r-o-b-o-t", 0.0),
        ("t-o-b-o-r-s", 0.0),
    ],
)
def test_exact_grader_reads_a_word_spelled_out_letter_by_letter(output: str, score: float) -> None:
    task = Task(id="e", prompt="Write the word 'robot' backwards.", answer="tobor",
                grader="exact", task="strings")  # fmt: skip
    result = graded(task, output)
    assert result.score == score, result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        ("tac", '```json\n{"answer": "tac", "explanation": "c-a-t reversed"}\n```', 1.0),
        ("tac", '{"answer": "tac", "note": "the word backwards"}', 1.0),
        ("cta", '{"answer": "tac", "note": "not cta"}', 0.0),
        ("tac", '{"answer": "cta", "note": "not tac"}', 0.0),
    ],
)
def test_the_answer_key_of_a_json_reply_is_the_answer(
    answer: str, output: str, score: float
) -> None:
    """A reply asked for JSON gives its answer under "answer"; it was no answer marker (the
    quote before ':'), so a later key's quoted text was read instead (was 0 for tac)."""
    result = graded(exact_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("output", "score"),
    [
        ('{"answer": [1, 2, 3]}', 1.0),
        ('```json\n{\n  "answer": [1, 2, 3],\n  "steps": 2\n}\n```', 1.0),
        ("{'final answer': [1, 2, 3], 'note': 'sorted from [3, 1, 2]'}", 1.0),
        ('{"answer": [1, 3, 2], "note": "the sorted list would be [1, 2, 3]"}', 0.0),
    ],
)
def test_the_answer_key_of_a_json_reply_is_the_list_the_regex_grader_reads(
    output: str, score: float
) -> None:
    """'{"answer": [1, 3, 2], ...}' was no final answer (the quote before ':'), so the pattern
    was searched in the whole reply and found in another key's text (was 1 for a wrong list)."""
    result = graded(regex_task(list_regex([1, 2, 3])), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    "output",
    [
        "<answer>ollhe</answer>\nOn reflection:\n<answer>olleh</answer>",
        "```\nollhe\n```\nNo:\n```\nolleh\n```",
        "Hello is a greeting, and reversed it is olleh",
    ],
)
def test_exact_grader_reads_the_last_answer_of_its_kind(output: str) -> None:
    assert graded(exact_task("olleh"), output).score == 1.0
    assert graded(exact_task("ollhe"), output).score == 0.0


@pytest.mark.parametrize(
    "output",
    [
        "The answer is [1, 2, 3]. Wait, no, it's [1, 3, 2].",
        "[1, 2, 3]? No wait: [1, 3, 2].",
        "The answer is [1, 2, 3]. That's wrong; it is [1, 3, 2].",
    ],
)
def test_an_anchored_pattern_matches_the_answer_after_a_retraction(output: str) -> None:
    """The text after a retraction kept its ", it's" and closing period, so a pattern
    anchored for a full match never matched the corrected answer."""
    result = graded(regex_task(r"^\[1, 3, 2\]$"), output)
    assert result.score == 1.0, result.detail
    assert graded(regex_task(r"^\[1, 2, 3\]$"), output).score == 0.0
