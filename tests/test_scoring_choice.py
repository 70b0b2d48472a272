"""The choice grader on good, bad and adversarial real-looking outputs."""

from __future__ import annotations

import time

import pytest
from conftest import LINEAR_CPU_S, WHO_IS_TALLER, graded

from fugu_lite.tasks import Task


def choice_task(answer: str) -> Task:
    prompt = "Who is the tallest?\n(A) Ann\n(B) Bob\n(C) Cal\nAnswer with the letter."
    return Task(id="c", prompt=prompt, answer=answer, grader="choice", task="logic")


@pytest.mark.parametrize(
    "output",
    [
        "(B)",
        "B",
        "Answer: B",
        "Answer — B",  # a dash after the marker, also after a bold label
        "Ann is shorter.\n\n**Final answer** — B",
        "**Answer** - B",
        "The correct option is b.",
        "B) Bob",
        "B. Bob is the tallest.",
        "**B**",
        "Ann is shorter than Bob, and Cal is shorter than Ann.\nSo the answer is (B).",
        "I first considered (A) Ann, but the answer is B.",
        "Let me think.\nBob is taller than both.\nB",
        "Bob",
        "the answer is a bit tricky, but the answer is B",
        "B is the correct answer.",
        "(A) is wrong because Ann is shorter, and (B) is correct.",
        "Option A is wrong; B is correct.",
        "B is correct; option A seems wrong.",
        "B is correct; option C looks incorrect.",  # its rejection past 12 characters
        "B\n\nExplanation: (A) Ann and (C) Cal are both shorter.",
        r"\boxed{B}",
        r"The answer is $\boxed{\text{B}}$",
        r"\boxed{(b)}",  # a lower-case letter in any form is the option's
        r"\boxed{**B**}",  # markdown inside the box
        "Bob is the tallest (b).",
        "<answer>B</answer>",
        "The answer is $B$.",
        "The tallest is Bob.",
        "B - Bob",
        "B — Bob is the tallest.",
        "b) Bob is the tallest.",
        "答案是Ｂ。",  # a full-width letter (NFKC)
        "Let me think.\n\nA\n\nHmm, Ann is shorter than Bob.\n\nB",  # the last letter line
        "First guess: A\nOn reflection: B",  # the last label
        "A is not the tallest; C is. Hmm, C is not the tallest; B is.",
    ],
)
def test_choice_grader_finds_the_letter(output: str) -> None:
    result = graded(choice_task("B"), output)
    assert result.score == 1.0, result.detail


@pytest.mark.parametrize(
    ("output", "why"),
    [
        ("(A)", "extracted A"),
        ("The answer is c.", "extracted C"),
        ("The answer is A or B", "ambiguous"),
        ("A or B", "ambiguous"),
        ("(A) Ann (B) Bob (C) Cal", "ambiguous"),
        ("Both (A) and (C) look right.", "ambiguous"),
        ("Ann\n\nBob", "ambiguous"),  # two options' texts, each a line
        ("Bob or Cal", "ambiguous"),
        ("I don't know.", "no option letter"),
        ("I have no idea how tall Bob is, sorry.", "no option letter"),  # names, not answers
        ("A\n\nBecause (B) Bob and (C) Cal are shorter.", "extracted A"),
        ("B - no wait, the tallest is Cal.", "extracted C"),
        ("B. Oops, I made a mistake: Cal is taller.", "no option letter"),
        ("Ruled out: B", "no option letter"),
        ("I compared the heights.\nEliminated: B", "no option letter"),
        ("", "empty output"),
    ],
)
def test_choice_grader_wrong_or_ambiguous(output: str, why: str) -> None:
    result = graded(choice_task("B"), output)
    assert result.score == 0.0
    assert why in result.detail


@pytest.mark.parametrize(
    ("output", "letter"),
    [
        ("I would choose B.", "B"),
        ("B is the tallest. I would never pick A.", "B"),
        ("Comparing heights, I pick B because Bob is the tallest.", "B"),
        ("Answer: The tallest is Bob, so B.", "B"),
        ("A) Ann - no\nB) Bob - yes\nC) Cal - no\n\nSo B.", "B"),
        ("Ann is 150 and Cal 170, so C is taller than A. Bob is 190. Thus, **B**.", "B"),
        ("B (Bob is the tallest)", "B"),
        ("Result: B", "B"),
        ("The result is B.", "B"),
        # a choice ruled out is not the answer
        ("I cannot choose A because Ann is short. (B) Bob.", "B"),
        ("I wouldn't pick A. (B) Bob.", "B"),
        ("Don't select A; B is correct.", "B"),
        ("We should not go with C. B is the answer.", "B"),
        # "it's" / "it must be" before a letter
        ("It's not A or C, so it must be B.", "B"),
        ("I think it is B because Bob is the tallest.", "B"),
        ("It's A, no wait, it's B.", "B"),
        ("It's B or C.", None),
        # "so" before a letter inside a sentence is no conclusion
        ("Ann is 150 cm, so C is taller than A.\n(B)", "B"),
        # a letter after a label that ends its line
        ("It is easy: B", "B"),
        ("Bob is taller than Ann and Cal.\nMy pick: **(B)**.", "B"),
        ("Easy: B\n\nWrong: A", "B"),
        # "the answer is" in Chinese (no letter was found before)
        ("答案是B。", "B"),
        ("鲍勃最高，所以正确答案是 B。", "B"),
        ("最终答案：B", "B"),
        ("A 不对。答案：C", "C"),
        # an option ruled out, then the one given
        ("Not A, but B.", "B"),
        ("The answer is not A but B.", "B"),
        ("Not (A), but (B).", "B"),
        ("It's not A, but rather B.", "B"),
        ("Not A, but C.", "C"),
        ("Not A, but B.\nC", "C"),  # a letter after it: the usual rules
        ("Not A, but C. Hmm, not C, but B.", "B"),  # the last one given
        # an option's text given twice as the answer: the last one (ambiguous before)
        ("Answer: Ann\nHmm, no. Answer: Bob", "B"),
        ("Answer: Ann.\nAnswer: Bob.", "B"),
        ("Bob\n\nAnswer: Ann", "A"),
        ("**Final answer** Bob", "B"),  # a bold label without its colon
        ("The answer is Ann.\n\n**Final answer** Bob", "B"),
        ("<answer>Ann</answer>\nNo:\n<answer>Bob</answer>", "B"),
        # "the letter is", and a lead-in before a letter ending its sentence, as "So B."
        ("The letter is B.", "B"),
        ("The correct letter is C.", "C"),
        ("Based on the heights, B.", "B"),
        ("Looking at the heights, C.", "C"),
        ("Given the heights, C is shorter than Bob.\n(B)", "B"),  # a letter in a sentence
        ("The answer is C. The middle letter is a.", "C"),  # a letter of its text
    ],
)
def test_choice_grader_reads_a_chosen_or_concluded_letter(output: str, letter: str | None) -> None:
    result = graded(choice_task("B"), output)
    assert result.score == (1.0 if letter == "B" else 0.0), result.detail
    assert (f"extracted {letter}" if letter else "ambiguous") in result.detail


@pytest.mark.parametrize(
    ("output", "why"),
    [
        # a second letter hedged after the one given read B, a hedge scored as a choice
        ("The answer is B (or C).", "ambiguous"),
        ("The answer is B or maybe C.", "ambiguous"),
        ("Answer: B, or possibly C", "ambiguous"),
        ("The answer is (B), or perhaps (C).", "ambiguous"),
        ("The answer is B/C.", "ambiguous"),
        # another letter named after the answer, not as a second one, leaves it
        ("The answer is B (and C is wrong).", "extracted B"),
        ("The answer is B, and C is wrong.", "extracted B"),
        ("The answer is B (or rather, Bob).", "extracted B"),
    ],
)
def test_choice_grader_reads_a_second_letter_hedged_after_the_answer_as_ambiguous(
    output: str, why: str
) -> None:
    result = graded(choice_task("B"), output)
    assert result.score == (1.0 if why == "extracted B" else 0.0), result.detail
    assert why in result.detail


@pytest.mark.parametrize(
    ("output", "letter"),
    [
        # no letter was read: "must be" was no marker, nor was a word between "is" and it
        ("Bob is 190 cm, so the answer must be B.", "B"),
        ("The answer is most likely B.", "B"),
        ("The answer is definitely B, since Bob is the tallest.", "B"),
        ("The correct answer is probably **B**.", "B"),
        ("The answer is clearly C, as Cal is 200 cm.", "C"),
        ("The answer is likely B or C.", None),
        # an article after the word is still no option a
        ("The answer is probably a trick, but Bob is the tallest: B", "B"),
    ],
)
def test_choice_grader_reads_a_letter_after_must_be_or_a_word_of_certainty(
    output: str, letter: str | None
) -> None:
    result = graded(choice_task("B"), output)
    assert result.score == (1.0 if letter == "B" else 0.0), result.detail
    assert (f"extracted {letter}" if letter else "ambiguous") in result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        # a list of the options is no answer: its first letter (A) is not chosen
        ("A", "Let me consider each option:\nA) Ann - short\nB) Bob - tall\nC) Cal - medium", 0.0),
        # also as a list of bullets, its letters bold or not, left without a conclusion (a
        # reply cut off): its first letter was the answer after "each option:"
        ("A", "Let's analyze each option:\n- (A) Ann: 150 cm\n- (B) Bob: 160 cm", 0.0),
        ("A", "Evaluating each choice:\n- **A)** Ann: 150 cm\n- **B)** Bob: 160 cm", 0.0),
        ("A", "Let's evaluate each answer:\n- A. Ann is 150 cm\n  - B. Bob is 160 cm", 0.0),
        ("A", "Let's weigh each option: A is 150 cm, B is 160 cm, C is 140 cm.", 0.0),
        ("A", "Let's weigh every option: A is 150 cm, B is 160 cm, C is 140 cm.", 0.0),
        # an option's line longer than the next letter's usual distance
        ("A", "The answer is:\nA) Ann, who is 150 cm tall, the shortest of the three\nB) Bob", 0.0),
        ("B", "Each option:\n- (A) Ann: 150 cm\n- (B) Bob: 160 cm\n\nSo the answer is (B).", 1.0),
        ("A", "A: Ann is 150 cm, B: Bob is 190 cm, C: Cal is 170 cm. So the tallest is Bob.", 0.0),
        ("B", "A: Ann is 150 cm, B: Bob is 190 cm, C: Cal is 170 cm. So the tallest is Bob.", 1.0),
        ("B", "Options:\n(A) Ann: short\n(B) Bob: tall\n\nThe answer is (B).", 1.0),
        # one letter after the marker is still the answer
        ("A", "Answer: A) Ann", 1.0),
        ("A", "A) Ann\n\nShe is the tallest of the three.", 1.0),
    ],
)
def test_choice_grader_does_not_read_a_list_of_the_options_as_an_answer(
    answer: str, output: str, score: float
) -> None:
    result = graded(choice_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("output", "letter"),
    [
        ("The answer is (B).\n\nWait, actually it's (C).", "C"),
        ("I'd say A. Actually, no, it's B.", "B"),
        ("Answer: B. Wait, it's C.", "C"),
        ("Sorry, I meant C", "C"),
        ("The answer is B. No, it's not C.", "B"),  # no correction: the answer stands
        ("Actually, it's a tough one. The answer is B.", "B"),
        # a bare correction whose letter ends its sentence
        ("Answer: B. Wait, actually C.", "C"),
        ("The answer is B. Hmm, actually, (C).", "C"),
        ("B\n\nWait, C.", "C"),
        ("Answer: B. I mean C!", "C"),
        ("The answer is B, no wait, C.", "C"),  # "no wait" read B before
        ("The answer is B. No wait, C.", "C"),
        ("Answer: B\n\nNo wait: C", "C"),
        ("The answer is B. There is no wait, C is slow.", "B"),
        ("Answer: B. Actually, C is wrong too.", "B"),
        ("Answer: B. Wait, C or A?", "B"),
        ("The answer is B. There are actually 3 options.", "B"),
        # a "No" answering the reply's own question takes the letter before it back
        ("The answer is B? No: C.", "C"),
        ("The answer is **B**? No, it is C.", "C"),
        ("The answer is B. No: C.", "C"),  # also a "No:" starting a sentence
        ("The answer is B? Yes: B.", "B"),
        # a "No," opening the sentence after the letter's, before a bare letter (no letter was
        # read: "B. No, C." taken for a list of the options)
        ("The answer is B. No, C.", "C"),
        ("The answer is B.\n\nNo, C.", "C"),
        ("The answer is B. No, C is wrong.", "B"),
        ("The answer is B. No, C is the tallest.", "C"),
        # a retraction before a bare letter ending its sentence (no letter, or B, was read)
        ("The answer is B. Oops, C.", "C"),
        ("B. Oops, C.", "C"),
        ("Answer: B. Sorry, C.", "C"),
        ("The answer is B. That seems wrong. C.", "C"),
        ("The answer is B. Oops — C.", "C"),
        ("B. Wait, no — it's C.", "C"),
        ("B... actually C", "C"),
        ("The answer is B. Oops, C is wrong too.", "B"),
        # a hesitation before a bare letter ending its sentence (B was read, or no letter: "B.
        # Hmm, C." was taken for a list of the options)
        ("The answer is B. Hmm, C.", "C"),
        ("B. Hmm, actually C.", "C"),
        ("Answer: B. Hmmm... C.", "C"),
        ("B. Hmm, C is wrong too.", "B"),
        ("The answer is B. Hmm, C is taller than A.", "B"),
        ("The answer is B. Hmm, C is correct.", "C"),
        ("The answer is B. Hmm, e.g. Cal is short.", "B"),  # no option e
        ("The answer is B. Oops, e.g. Cal is short.", "B"),
        ("B. C is wrong because Cal is short.", "B"),
        # a bare correction's letter said to be correct or what is asked (B was read)
        ("Answer: B. Wait, actually C is correct.", "C"),
        ("The answer is B. Oops, C is the right answer.", "C"),
        ("Answer: B. Actually, C is the tallest.", "C"),
        ("Answer: B. Actually, C is taller than A.", "B"),
        ("Answer: B. Actually, C is correct too.", "B"),
        ("Answer: B. Wait, actually C is correct as well.", "B"),
    ],
)
def test_choice_grader_follows_a_self_correction(output: str, letter: str) -> None:
    for expected in "BC":
        result = graded(choice_task(expected), output)
        assert result.score == (1.0 if expected == letter else 0.0), result.detail


@pytest.mark.parametrize(
    ("output", "score"),
    [
        ("I'm not sure, but I think B.", 1.0),
        ("I guess B!", 1.0),
        ("I believe, (B).", 1.0),
        ("I think A is tall, but B is the tallest.", 1.0),
        ("I think A.", 0.0),
        ("I think B? Or A?", 0.0),
    ],
)
def test_choice_grader_reads_a_guess(output: str, score: float) -> None:
    result = graded(choice_task("B"), output)
    assert result.score == score, result.detail


def test_choice_grader_takes_linear_time_on_a_repeated_article() -> None:
    started = time.process_time()
    output = "the answer is a bit long, " * 100_000 + "\nB"
    assert graded(choice_task("B"), output).score == 1.0
    assert time.process_time() - started < LINEAR_CPU_S


SYLLOGISM = (
    "All wugs are daxes. All daxes are feps. Are all wugs feps?\n(A) No\n(B) Cannot tell\n"
    "(C) Yes\nAnswer with the letter of the correct option."
)


@pytest.mark.parametrize(
    ("output", "score"),
    [
        ("Yes, all wugs are feps.", 1.0),
        ("Since all wugs are daxes and all daxes are feps, all wugs are feps. Yes.", 1.0),
        ("Yes!\n\nEvery wug is a dax, and every dax is a fep.", 1.0),
        ("No, not all wugs are feps.", 0.0),
        # another option named too, or the option inside a clause: no answer
        ("Yes, but I cannot tell for sure.", 0.0),
        ("No, wait. Yes.", 0.0),
        ("No idea, sorry.", 0.0),
    ],
)
def test_choice_grader_reads_an_option_text_opening_or_closing_the_reply(
    output: str, score: float
) -> None:
    task = Task(id="c", prompt=SYLLOGISM, answer="C", grader="choice", task="logic")
    result = graded(task, output)
    assert result.score == score, result.detail


SMALLEST = (
    "Which number is the smallest?\n(A) 42\n(B) 17\n(C) 35\n"
    "Answer with the letter of the correct option."
)


@pytest.mark.parametrize(
    ("output", "score"),
    [
        ("B is the smallest.", 1.0),
        ("17 is the smallest.", 1.0),
        ("42 is the smallest.", 0.0),
        # another superlative than the one asked is no answer (the one asked after it is)
        ("A is the largest.", 0.0),
        ("A is the largest, so the smallest is B.", 1.0),
        ("B is the largest, so the smallest is A.", 0.0),
        ("42 is the largest.", 0.0),
    ],
)
def test_choice_grader_reads_the_option_said_to_be_what_the_question_asks(
    output: str, score: float
) -> None:
    task = Task(id="c", prompt=SMALLEST, answer="B", grader="choice", task="logic")
    result = graded(task, output)
    assert result.score == score, result.detail


TALLER = "Ann is taller than Bob. Who is taller?\n(A) Bob\n(B) Ann\n"
LARGER = "Which number is larger?\n(A) 54\n(B) 9\nAnswer with the letter of the correct option."
EVEN = "Which of these numbers is even?\n(A) 7\n(B) 12\n(C) 33\n"
TALLEST = "Ann is taller than Bob. Bob is taller than Cy. Who is the tallest?\n(A) Bob\n(B) Ann\n"


@pytest.mark.parametrize(
    ("prompt", "output", "answer", "score"),
    [
        # the conclusion names the answer, not the first option named
        (TALLER, "Between A and B, B is taller.", "B", 1.0),
        (TALLER, "Between A and B, B is taller.", "A", 0.0),
        (TALLER, "Ann is taller than Bob.", "B", 1.0),
        (LARGER, "B is smaller, A is larger.", "A", 1.0),
        (LARGER, "B is smaller, A is larger.", "B", 0.0),
        # the option said to be it after a label or a word leading its clause
        (LARGER, "Comparing them: 54 is larger than 9.", "A", 1.0),
        (LARGER, "9 < 54, thus 54 is larger.", "A", 1.0),
        (LARGER, "54 is larger than 9.", "A", 1.0),
        (LARGER, "The larger number is 54, not 9.", "A", 1.0),
        (LARGER, "The larger number is 54, not 9.", "B", 0.0),
        (EVEN, "7 is odd, 12 is even, 33 is odd.", "B", 1.0),
        # two options said to be what is asked: ambiguous, whichever is right
        (EVEN, "7 is even, 12 is even.", "A", 0.0),
        (EVEN, "7 is even, 12 is even.", "B", 0.0),
        (TALLEST, "Bob is taller than Cy, and Ann is the tallest.", "B", 1.0),
        # a comparative of the facts, not of the question, answers nothing
        (TALLEST, "A is taller than Cy.", "A", 0.0),
        (TALLER, "Bob is taller than Ann? No. Ann is taller.", "A", 0.0),
    ],
)
def test_choice_grader_reads_the_option_said_to_be_what_the_question_asks_for(
    prompt: str, output: str, answer: str, score: float
) -> None:
    task = Task(id="c", prompt=prompt, answer=answer, grader="choice", task="logic")
    result = graded(task, output)
    assert result.score == score, result.detail


DIVISIBLE = "Which number is divisible by 3?\n(A) 12\n(B) 10\n"


def test_choice_grader_reads_only_the_predicate_the_question_asks() -> None:
    """ "divisible by 4" is not "divisible by 3": the reply names two options, no answer."""
    task = Task(id="c", prompt=DIVISIBLE, answer="A", grader="choice", task="logic")
    result = graded(task, "12 is divisible by 4, 10 is divisible by 3.")
    assert result.score == 0.0, result.detail
    assert graded(task, "10 is divisible by 5, 12 is divisible by 3.").score == 1.0


def test_what_the_question_asks_is_read_in_linear_time() -> None:
    choice = Task(id="c", prompt="is " * 50_000 + "?\n(A) Bob\n(B) Ann\n", answer="A",
                  grader="choice", task="logic")  # fmt: skip
    exact = Task(id="e", prompt=WHO_IS_TALLER, answer="Bob", grader="exact", task="logic")
    started = time.process_time()
    assert graded(choice, "Ann is tall").score is not None
    assert graded(Task(**{**choice.model_dump(), "prompt": TALLER}), "A is taller " * 50_000).score
    assert graded(exact, "x" + " " * 200_000 + " is taller").score == 0.0
    assert graded(exact, "Bob is taller " * 50_000).score == 1.0
    assert time.process_time() - started < LINEAR_CPU_S


def test_choice_grader_reads_option_texts_in_linear_time_on_a_run_of_spaces() -> None:
    task = Task(id="c", prompt=TALLEST, answer="B", grader="choice", task="logic")
    started = time.process_time()
    assert graded(task, "The tallest is Ann" + " " * 200_000 + "x").score == 0.0
    assert graded(task, "Ann" + " " * 200_000 + "is the tallest").score == 1.0
    assert time.process_time() - started < LINEAR_CPU_S


@pytest.mark.parametrize(
    ("output", "score"),
    [
        ("Not A, not C. B.", 1.0),
        ("Not A, not C. **B**.", 1.0),
        ("not a, not c. b.", 1.0),
        ("not a, not c. b", 1.0),
        ("Not A, not C; B.", 1.0),
        ("not b, not c. a.", 0.0),
        ("Ann is shorter than Bob; Cal is the shortest. B!", 1.0),
        ("Not B, not C. A.", 0.0),
        ("Not A, not C. B?", 0.0),  # a question, not an answer
        ("It is not A. Wrong: B.", 0.0),
        ("A is not the tallest; B is.", 1.0),
        ("A isn't the tallest, but B is.", 1.0),
        ("A is not correct; B is.", 1.0),
        ("B is not the tallest; A is.", 0.0),
        ("A is not the tallest; B is not either.", 0.0),
        ("A is not the shortest; B is.", 0.0),  # "the shortest" is not what is asked
        ("A is not wrong; B is.", 0.0),
    ],
)
def test_choice_grader_reads_a_letter_left_after_the_others_are_ruled_out(
    output: str, score: float
) -> None:
    result = graded(choice_task("B"), output)
    assert result.score == score, result.detail


def test_choice_grader_reads_a_closing_letter_in_linear_time() -> None:
    started = time.process_time()
    for output in ("." + " " * 200_000 + "x", "A isn't the tallest; " * 20_000):
        assert graded(choice_task("B"), output).score == 0.0
    assert time.process_time() - started < LINEAR_CPU_S


def test_choice_grader_reads_a_marker_before_a_run_of_spaces_in_linear_time() -> None:
    """The spaces after a marker were tried split every way among the marker's optional
    parts: "Answer" and 90 spaces took about 15 s, 200 would take half an hour. Each
    output's time is checked before the next: the first shows it in seconds."""
    started = time.process_time()
    for output, score in (
        ("Answer" + " " * 90 + "!", 0.0),
        ("Answer" + " " * 200_000 + "!", 0.0),
        ("Hmm," + " " * 200_000 + "?", 0.0),
        ("Answer:" + " " * 200_000 + "B", 1.0),
    ):
        assert graded(choice_task("B"), output).score == score
        assert time.process_time() - started < LINEAR_CPU_S


@pytest.mark.parametrize(
    ("output", "score"),
    [
        ("Ann is the shortest, so the tallest is B.", 1.0),
        ("The tallest is B.", 1.0),
        ("The tallest one is **(B)**.", 1.0),
        ("A is the tallest. Wait, the tallest is B.", 1.0),
        ("Bob is taller than Ann, so the tallest is A.", 0.0),
        ("The shortest is B.", 0.0),  # not what the question asks
        ("The tallest is B? No, A is the tallest.", 0.0),
        ("The tallest is not B.", 0.0),
    ],
)
def test_choice_grader_reads_the_letter_said_to_be_what_the_question_asks(
    output: str, score: float
) -> None:
    result = graded(choice_task("B"), output)
    assert result.score == score, result.detail


def test_choice_grader_reads_what_is_asked_in_linear_time() -> None:
    started = time.process_time()
    assert graded(choice_task("B"), "the tallest is " * 50_000).score == 0.0
    assert time.process_time() - started < LINEAR_CPU_S


@pytest.mark.parametrize(
    ("output", "score"),
    [
        ("[x] B  [ ] C", 1.0),
        ("- [ ] A\n- [x] B\n- [ ] C", 1.0),
        ("- [ ] (A) Ann\n- [X] (B) Bob\n- [ ] (C) Cal", 1.0),
        ("☐ A\n☑ B\n☐ C", 1.0),
        ("A) Ann ❌\nB) Bob ✅\nC) Cal ❌", 1.0),
        ("A ❌ B ✅ C ❌", 1.0),
        ("**B** ✅", 1.0),
        ("❌\ufe0f A\n✅\ufe0f B", 1.0),  # emoji marks with their variation selector
        ("Ann is 150 cm and Bob 160 cm.\n✔\ufe0f B", 1.0),
        ("- [x] A\n- [ ] B", 0.0),
        ("[x] A [x] B", 0.0),  # two options checked
        ("✅ Option A is wrong", 0.0),  # the mark is next to no letter
        ("A ✅ B", 0.0),  # one mark for two letters
    ],
)
def test_choice_grader_reads_the_option_checked(output: str, score: float) -> None:
    result = graded(choice_task("B"), output)
    assert result.score == score, result.detail


def test_two_options_checked_are_ambiguous_whichever_is_right() -> None:
    for answer in ("A", "B"):
        result = graded(choice_task(answer), "[x] A [x] B")
        assert result.score == 0.0, result.detail
        assert "ambiguous: checks A, B" in result.detail


def test_choice_grader_reads_no_check_mark_when_the_question_asks_for_a_wrong_one() -> None:
    prompt = "Which of these numbers is NOT odd?\n(A) 5\n(B) 4\n(C) 9\nAnswer with the letter."
    task = Task(id="c", prompt=prompt, answer="A", grader="choice", task="logic")
    assert graded(task, "A) 5 ✅\nB) 4 ❌\nC) 9 ✅").score == 0.0  # ticks the odd ones
    assert graded(task, "- [x] A").score == 0.0
    # "except" asks for the one that is not so, as "NOT" does
    except_prompt = "All of these numbers are odd EXCEPT which one?\n(A) 5\n(B) 4\n(C) 9"
    ticked = "A) 5 ✅ odd\nB) 4 ❌ even\nC) 9 ✅ odd\n\nSo the one that is not odd is 4."
    except_task = Task(id="c", prompt=except_prompt, answer="B", grader="choice", task="logic")
    assert graded(except_task, ticked).score == 1.0


@pytest.mark.parametrize(
    ("output", "score"),
    [
        ("B ✅", 1.0),
        ("4 is even, so it is not odd.\n\n**B** ✅", 1.0),
        ("✅ (B)", 1.0),
        # a checklist's item, two ticks or a cross: the ticks may mark the options that are so
        ("- [x] B", 0.0),
        ("B ✅\nC ✅", 0.0),
        ("A ❌\nB ✅", 0.0),
    ],
)
def test_the_one_check_mark_beside_a_letter_alone_answers_a_question_for_a_wrong_one(
    output: str, score: float
) -> None:
    """A reply's only mark, beside a bare letter on its line, is its answer even when the
    question asks for the option that is NOT so (its marks are read no other way then)."""
    prompt = "Which of these numbers is NOT odd?\n(A) 5\n(B) 4\n(C) 9\nAnswer with the letter."
    task = Task(id="c", prompt=prompt, answer="B", grader="choice", task="logic")
    result = graded(task, output)
    assert result.score == score, result.detail


LARGER = "Which number is larger?\n(A) 42\n(B) 17\nAnswer with the letter of the correct option."


@pytest.mark.parametrize(
    ("output", "score"),
    [
        ("Option A (42) is larger than option B (17).", 1.0),
        ("I pick option A over option B.", 1.0),
        ("Option B is smaller, so option A.", 1.0),
        ("Option B is wrong, option A is right.", 1.0),
        ("The answer is A. Compared with option B, it is larger.", 1.0),
        ("Option B (17) is smaller than option A (42).", 0.0),  # a comparison, no choice
        ("Option B (17) is the larger.", 0.0),
        ("Option A (42) is smaller than option B (17).", 0.0),
    ],
)
def test_choice_grader_does_not_read_an_option_only_compared(output: str, score: float) -> None:
    task = Task(id="c", prompt=LARGER, answer="A", grader="choice", task="logic")
    result = graded(task, output)
    assert result.score == score, result.detail


@pytest.mark.parametrize(
    ("output", "chosen"),
    [
        # a labelled option said to be what the question does not ask (B was read)
        ("Option: B (17) is smaller than A.", None),
        ("Option - B (17) is smaller.", None),
        ("Option: A is the larger.", "A"),
        ("The correct option is A.", "A"),
    ],
)
def test_choice_grader_does_not_read_a_labelled_option_only_compared(
    output: str, chosen: str | None
) -> None:
    for answer in "AB":
        task = Task(id="c", prompt=LARGER, answer=answer, grader="choice", task="logic")
        result = graded(task, output)
        assert result.score == (1.0 if answer == chosen else 0.0), result.detail


CAPITAL = "Which city is the capital of France?\nA) London\nB) Paris\nC) Rome\nD) Madrid"


@pytest.mark.parametrize(
    ("output", "score"),
    [
        ("The capital of France is B) Paris.", 1.0),
        ("Among the options, B) Paris is the capital of France.", 1.0),
        ("The capital of France is b. paris", 1.0),
        ("It is not B) Paris.", 0.0),  # ruled out
        ("Some say B) Paris is wrong.", 0.0),
        ("The capital of France is A) Paris.", 0.0),  # the text is not its letter's
    ],
)
def test_the_only_option_cited_with_its_letter_and_text_is_the_answer(
    output: str, score: float
) -> None:
    task = Task(id="c", prompt=CAPITAL, answer="B", grader="choice", task="logic")
    result = graded(task, output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        ("B", "**Answer: B**\n\nOption A, Ann, is the shortest of the three.", 1.0),
        ("B", "The answer is B. Unlike option C, Cal, Bob is over 2 m.", 1.0),
        ("A", "**Answer: B**\n\nOption A, Ann, is the shortest of the three.", 0.0),
        # an option named with its text between commas, said to be what is asked
        ("B", "Option B, Bob, is the tallest.", 1.0),
    ],
)
def test_an_option_named_after_the_answer_in_an_aside_or_contrast_is_not_chosen(
    answer: str, output: str, score: float
) -> None:
    """After "Answer: B", "Option A, Ann, is the shortest" (its text between commas) or
    "Unlike option C, ..." named a letter the grader took as the answer (was A / C)."""
    result = graded(choice_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        ("B", '{"answer": "B"}', 1.0),
        ("B", '```json\n{"answer": "B", "reason": "Bob (B) is 2 m, Ann (A) 1.6 m"}\n```', 1.0),
        ("B", "{'choice': 'B'}", 1.0),
        ("A", '{"answer": "B", "reason": "Bob (B) is 2 m, Ann (A) 1.6 m"}', 0.0),
    ],
)
def test_the_answer_key_of_a_json_reply_gives_the_letter(
    answer: str, output: str, score: float
) -> None:
    """A reply asked for JSON gives its letter under "answer": it was no answer marker (the
    quotes), so '{"answer": "B"}' had no letter and the reason's two were ambiguous."""
    result = graded(choice_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


FASTEST = "Who runs the fastest?\n(A) Ann\n(B) Bob\n(C) Cal"
TALLER_IN_CAPITALS = "Who is TALLER, Ann or Bob?\n(A) Ann\n(B) Bob"


@pytest.mark.parametrize(
    ("prompt", "output"),
    [
        (FASTEST, "Ann is slow. B is the fastest."),  # a superlative outside the "is"
        (TALLER_IN_CAPITALS, "Ann is 150 cm and Bob is 160 cm, so B is taller."),
        # options listed with a dot are a list, not a leading answer A
        (choice_task("B").prompt, "A. Ann is 150 cm.\nB. Bob is 160 cm.\nSo the tallest is Bob."),
        # the option's whole text, not one inside it: 5 is in 15
        ("Which number is larger?\n(A) 5\n(B) 15", "15 is larger than 5."),
        # what the question asks without its article: "a multiple of 3"
        ("Which number is a multiple of 3?\n(A) 10\n(B) 12\n(C) 14", "12 is a multiple of 3."),
    ],
)
def test_choice_grader_reads_what_any_question_asks_and_a_list_with_dots(
    prompt: str, output: str
) -> None:
    task = Task(id="c", prompt=prompt, answer="B", grader="choice", task="logic")
    result = graded(task, output)
    assert result.score == 1.0, result.detail


def test_a_question_asking_for_one_that_is_something_reads_no_predicate_one() -> None:
    """ "Which animal is one that can fly?" asks no predicate "one that can": "Dog is one that
    can swim, not fly." says nothing the question asks, and chooses no option."""
    prompt = "Which animal is one that can fly?\n(A) Dog\n(B) Bird\n(C) Cat"
    task = Task(id="c", prompt=prompt, answer="A", grader="choice", task="logic")
    assert graded(task, "Dog is one that can swim, not fly.").score == 0.0
