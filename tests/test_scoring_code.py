"""The code grader and its sandbox."""

from __future__ import annotations

import asyncio
import html
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import FAST, LINEAR_CPU_S, finished_pid, graded, writer_temporary

import fugu_lite.sandbox as sandbox_module
from fugu_lite.sandbox import SandboxLimits, SandboxResult, run_python_tests
from fugu_lite.sandbox_results import collect_results
from fugu_lite.scoring import Grade, grade
from fugu_lite.scoring.code import extract_code
from fugu_lite.tasks import Task

ADD_TESTS = """
import math
assert add(1, 2) == 3
assert add(-1, 1) == 0
def test_floats():
    assert math.isclose(add(0.1, 0.2), 0.3)
def test_strings():
    assert add("a", "b") == "ab"
"""


ADD = "def add(a, b):\n    return a + b\n"


def code_task(tests: str = ADD_TESTS) -> Task:
    return Task(id="k", prompt="Write add(a, b).", tests=tests, grader="code", task="code")


def test_code_grader_runs_fenced_code() -> None:
    output = (
        "Sure! Here is the function:\n\n```python\ndef add(a, b):\n    return a + b\n```\n\n"
        "Example:\n```python\nprint(add(2, 3))  # 5\n```\nThis works for numbers and strings."
    )
    result = graded(code_task(), output)
    assert result.score == 1.0, result.detail
    assert result.detail == "4/4 tests passed"


def test_a_function_in_an_untagged_fence_counts_next_to_a_python_usage_example() -> None:
    function = "```\ndef add(a, b):\n    return a + b\n```\n"
    usage = "Usage:\n```python\nprint(add(2, 3))\n```\nOutput:\n```\nFive\n```"
    assert graded(code_task(), function + usage).score == 1.0
    wrong_again = "```\ndef add(a, b):\n    return a - b\n```"  # the last definition counts
    assert graded(code_task(), f"```python\n{ADD}```\nOr:\n{wrong_again}").score == 0.0


@pytest.mark.parametrize(
    "shown",
    [
        "Output:\n```\nFizz\n```",
        "For add(1, 2) it prints:\n```\nthree\n```",
        "Save it as:\n```\nsolution.py\n```",
    ],
)
def test_output_in_an_untagged_fence_beside_an_untagged_function_is_not_code(shown: str) -> None:
    """A word or a file name shown in a block of its own parses, as a name the code would
    look up before any test ran (NameError: every test failed)."""
    function = f"```\n{ADD}```\n"
    for output in (function + shown, shown + "\n" + function):
        result = graded(code_task(), output)
        assert result.score == 1.0, result.detail


@pytest.mark.parametrize(
    ("setup", "body"),
    [
        ("import operator\n", "operator.add(a, b)"),
        ("from operator import add as plus\n", "plus(a, b)"),
        ("ENABLED = True\n", "a + b if ENABLED else None"),
    ],
)
def test_imports_in_an_untagged_fence_of_their_own_stay_with_the_function(
    setup: str, body: str
) -> None:
    """Leaving out the untagged blocks that define no function or class (output shown in a
    block) left out a step-by-step reply's block of imports or constants too, so the
    function's names raised NameError and every test failed; a block that imports or
    assigns is code, kept with the function (output, "3", still is not)."""
    function = f"def add(a, b):\n    return {body}\n"
    output = f"First, the setup:\n```\n{setup}```\nThen:\n```\n{function}```\nOutput:\n```\n3\n```"
    result = graded(code_task(), output)
    assert result.score == 1.0, result.detail


@pytest.mark.parametrize("tag", ["python", "Python3", "py"])
def test_a_language_line_left_from_a_lost_fence_is_not_code(tag: str) -> None:
    # the name `python` would raise NameError before any test ran
    assert graded(code_task(), f"{tag}\n{ADD}").score == 1.0


def test_the_models_own_pytest_block_is_left_out() -> None:
    # pytest is not importable in the sandbox: the block failed the whole answer
    tests = "```python\nimport pytest\n\n@pytest.fixture\ndef pair():\n    return 1, 2\n\n"
    tests += "def test_add(pair):\n    assert add(*pair) == 3\n```"
    output = f"Solution:\n```python\n{ADD}```\nTests:\n{tests}"
    assert extract_code(output) == ADD
    assert graded(code_task(), output).score == 1.0
    alone = graded(code_task(), tests)  # nothing else to run: still graded, still 0
    assert alone.score == 0.0
    assert "No module named 'pytest'" in alone.detail
    raises = "```python\nfrom pytest import raises\n\ndef test_add():\n    assert add(1, 2) == 3\n"
    raises += "```"
    assert extract_code(f"```python\n{ADD}```\n{raises}") == ADD


@pytest.mark.parametrize("tag", ["py", "Python", "PY3", "python3"])
def test_a_python_fence_tagged_in_any_case_or_short_is_the_code_beside_a_usage_block(
    tag: str,
) -> None:
    # read as untagged, the function was left for the usage block ("add(2, 3)": NameError)
    assert extract_code(f"```{tag}\n{ADD}```\n\nUsage:\n```\nadd(2, 3)\n```") == ADD


def test_output_shown_beside_an_untagged_class_is_not_code() -> None:
    stack = "class Stack:\n    def __init__(self):\n        self.items = []\n"
    assert extract_code(f"```\n{stack}```\n\nOutput:\n```\nEmpty\n```") == stack


@pytest.mark.parametrize("tag", ["python", "Python3", "py"])
def test_a_language_line_inside_an_untagged_fence_is_not_code(tag: str) -> None:
    # "```\npython\n...": the tag written on the line below the fence
    assert graded(code_task(), f"Here:\n```\n{tag}\n{ADD}```\nDone.").score == 1.0
    assert graded(code_task(), f"```\n{tag}\r\n{ADD}```").score == 1.0


@pytest.mark.parametrize("opening", ["```python def add(a, b):", "```def add(a, b):"])
def test_code_written_on_the_fence_line_is_kept(opening: str) -> None:
    output = f"Here:\n{opening}\n    return a + b\n```\nDone."
    assert extract_code(output) == "def add(a, b):\n    return a + b\n"
    assert graded(code_task(), output).score == 1.0
    titled = '```python title="add.py"\ndef add(a, b):\n    return a + b\n```'  # an info string
    assert extract_code(titled) == ADD


@pytest.mark.parametrize(
    "shown", ["Example:\n```\n>>> add(1, 2)\n3\n```", "It prints:\n```python\nthree\n```"]
)
def test_raw_code_beside_a_block_of_output_only_is_the_code(shown: str) -> None:
    """A function written without a fence, then its output shown in a block, ran the block
    alone (">>> add(1, 2)": SyntaxError; "three": NameError; 0) and left the function out."""
    for output in (f"Here it is:\n{ADD}\n{shown}\nDone.", f"{shown}\n{ADD}"):
        assert (extract_code(output) or "").strip() == ADD.strip(), output
    assert graded(code_task(), f"{ADD}\n{shown}").score == 1.0
    block = shown.split("```")[1].split("\n", 1)[1]
    assert extract_code(shown) == block  # no function outside: the block, as before


def test_code_grader_takes_raw_code_after_prose() -> None:
    output = "Here you go:\ndef add(a, b):\n    return a + b\nThat is all."
    assert extract_code(output) == "def add(a, b):\n    return a + b"
    assert graded(code_task(), output).score == 1.0
    imports = "Here you go:\nimport operator\n\ndef add(a, b):\n    return operator.add(a, b)\n"
    assert extract_code(imports).startswith("import operator\n")  # from its first code line


@pytest.mark.parametrize(
    "output",
    [
        "Here is the code: def add(a, b):\n    return a + b\nHope it helps.",
        "Answer: def add(a, b): return a + b",
        "Sure!\n\n1. def add(a, b):\n    return a + b",
    ],
)
def test_code_grader_takes_a_function_that_starts_after_prose_on_its_line(output: str) -> None:
    assert extract_code(output) in (ADD.strip(), "def add(a, b): return a + b")
    assert graded(code_task(), output).score == 1.0


@pytest.mark.parametrize(
    "output",
    [
        "    def add(a, b):\n        return a + b\n",
        "Here you go:\n\n    def add(a, b):\n        return a + b\n\nThat is all.",
        "Here you go:\n\n\tdef add(a, b):\n\t\treturn a + b",
    ],
)
def test_code_grader_takes_code_indented_as_a_markdown_code_block(output: str) -> None:
    assert graded(code_task(), output).score == 1.0


ADD_ESCAPED = "def add(a, b):\n    return a + b if a &lt; b or a &gt;= b else None\n"


@pytest.mark.parametrize(
    "output",
    [
        f'Here it is:\n<pre><code class="language-python">{ADD_ESCAPED}</code></pre>\nDone.',
        f"<pre>{ADD_ESCAPED}</pre>",
        f"<code>{ADD_ESCAPED}</code>",
        "<code>def add(a, b): return a + b</code> adds them.",
        # a name in inline code is prose; output shown in a <pre> beside the function is no code
        f"The function <code>add</code>:\n<pre><code>{ADD_ESCAPED}</code></pre>\n<pre>3</pre>",
        f"<PRE><CODE>{ADD_ESCAPED}\nThis function adds a and b.",  # cut off: never closed
    ],
)
def test_code_in_html_code_elements_without_a_fence_is_the_code(output: str) -> None:
    """Some chat models answer in HTML: the tags ran as code (SyntaxError, 0), and `&lt;`
    escaping `<` too."""
    result = graded(code_task(), output)
    assert result.score == 1.0, result.detail


@pytest.mark.parametrize(
    "output",
    [
        f"<pre><div><div>Copy code</div><div><code>{ADD_ESCAPED}</code></div></div></pre>",
        '<pre><div class="bg-black rounded-md"><div class="flex items-center"><span>python</span>'
        '<button class="flex ml-auto gap-2">Copy code</button></div><div class="p-4"><code '
        f'class="!whitespace-pre hljs language-python">{ADD_ESCAPED}</code></div></div></pre>',
    ],
)
def test_code_in_a_chat_pages_copy_code_box_is_the_code(output: str) -> None:
    """Models trained on chat pages saved as HTML (ShareGPT's) answer with the page's code box,
    a label and a "Copy code" button before the `<code>` in the `<pre>` (Koala-13b's, in
    the-crypt-keeper/can-ai-code issue #13): the box's text ran as code ("pythonCopy codedef
    add(a, b):", SyntaxError, 0)."""
    assert extract_code(output) == html.unescape(ADD_ESCAPED)
    result = graded(code_task(), output)
    assert result.score == 1.0, result.detail


def test_a_language_on_the_pre_around_a_code_element_is_its_language() -> None:
    """`<pre class="language-python"><code>` (Prism's markup, GitLab's) was read as an
    untagged block: a solution defining no function ran with the output shown in the next
    block, "three" (NameError, 0), where its fenced twin, ```` ```python ````, scores 1."""
    solution, shown = "from operator import add\n", "For add(1, 2) it prints:"
    fenced = f"```python\n{solution}```\n{shown}\n```\nthree\n```"
    in_html = f'<pre class="language-python"><code>{solution}</code></pre>\n{shown}\n'
    in_html += "<pre><code>three</code></pre>"
    for output in (fenced, in_html):
        assert extract_code(output) == solution, output
    assert graded(code_task(), in_html).score == 1.0


@pytest.mark.parametrize(
    "opener",
    [
        '<pre lang="python">',  # GitHub's markup
        "<pre lang=py>",
        '<pre class="python">',
        '<pre><code class="Python3">',
        "<pre class='hljs python'>",  # highlight.js 9's
        "<pre><code class=py>",
    ],
)
def test_a_lang_attribute_or_a_class_naming_python_tags_an_html_block(opener: str) -> None:
    """`<pre lang="python">` and a class that is a python tag were read as untagged: a
    solution defining no function ran with the output shown beside it, "three" (NameError,
    0), where its fenced twin, ```` ```python ````, scores 1."""
    solution, shown = "from operator import add\n", "For add(1, 2) it prints:"
    closer = "</code></pre>" if "<code" in opener else "</pre>"
    in_html = f"{opener}{solution}{closer}\n{shown}\n<pre>three</pre>"
    assert extract_code(in_html) == solution
    assert graded(code_task(), in_html).score == 1.0


def test_a_lang_attribute_naming_another_language_leaves_its_block_out() -> None:
    javascript = '<pre lang="javascript">const add = (a, b) => a + b;</pre>'
    assert extract_code(f"<pre>{ADD}</pre>\nIn JavaScript:\n{javascript}") == ADD


AREA = "def area(r):\n    return math.pi * r ** 2\n"


@pytest.mark.parametrize(
    ("output", "code"),
    [
        (f'Here:\n<pre lang="en"><code>{ADD_ESCAPED}</code></pre>\nIt adds.', ADD_ESCAPED),
        (f'<pre lang="en-US">{ADD_ESCAPED}</pre>', ADD_ESCAPED),
        (f"```text\nimport math\n```\nThen:\n```text\n{AREA}```", f"import math\n\n\n{AREA}"),
        (f"```plaintext\n{ADD}```\nUsage:\n```python\nprint(add(1, 2))\n```", None),
        (f"```console\n{ADD}```\nIt prints:\n```console\n3\n```", ADD),
    ],
    ids=["html-lang-en", "html-lang-en-us", "text-imports", "plaintext-beside-python", "console"],
)
def test_python_defining_a_function_in_a_block_tagged_as_text_is_the_code(
    output: str, code: str | None
) -> None:
    """A block tagged with no programming language (`lang="en"`, HTML's natural language of
    the text; `text`, `plaintext`, `console`) was left out as another language's: its
    escaped HTML ran as code (`a &lt; b`, SyntaxError, 0), a block of imports before it ran
    alone, or only the python usage block beside it ran (NameError, 0)."""
    expected = html.unescape(code) if code else f"{ADD}\n\nprint(add(1, 2))\n"
    assert extract_code(output) == expected


def test_a_block_tagged_with_another_language_is_code_only_when_its_python_defines() -> None:
    assert graded(code_task(), f"<pre lang=en>{ADD_ESCAPED}</pre>").score == 1.0
    beside_python = f"```python\n{ADD}```\nIt prints:\n```text\nthree\n```"  # output: no code
    assert extract_code(beside_python) == ADD
    # a python block's usage stays with it; another language's that defines nothing stays out
    usage = "Usage:\n```python\nprint(add(1, 2))\n```"
    assert extract_code(f"```python\n{ADD}```\n{usage}") == f"{ADD}\n\nprint(add(1, 2))\n"
    assert extract_code(f"```\n{ADD}```\nIn settings.ini:\n```ini\nlevel = 3\n```") == ADD


def test_a_text_block_beside_a_python_definition_stays_out() -> None:
    """A wrong version shown in a `text` block after the python solution ("A common
    mistake:") was run after it, so its `add` replaced the solution's (0): a block of another
    language is read as untagged only when no python block defines anything."""
    mistake = "def add(a, b):\n    return a - b\n"
    output = f"Solution:\n```python\n{ADD}```\nA common mistake:\n```text\n{mistake}```"
    assert extract_code(output) == ADD
    assert graded(code_task(), output).score == 1.0


@pytest.mark.parametrize(
    "output",
    [
        "`def add(a, b): return a + b`",
        "Here it is: `def add(a, b): return a + b`. It adds them.",
        "Call `add` once you define it: `def add(a, b): return a + b`",
        # between two or three backticks, as Markdown allows: a one-line "fence"
        "```def add(a, b): return a + b```",
        "Here it is: ``def add(a, b): return a + b``",
    ],
)
def test_a_definition_in_inline_code_is_the_code(output: str) -> None:
    """A one-line answer in inline code ran with its backticks: a SyntaxError, 0."""
    assert extract_code(output) == "def add(a, b): return a + b"
    assert graded(code_task(), output).score == 1.0


def test_code_grader_unclosed_fence_and_partial_credit() -> None:
    output = "```python\ndef add(a, b):\n    return float(a) + float(b)\n"  # ran out of tokens
    result = graded(code_task(), output)
    assert result.score == 0.75  # the string test fails
    assert "first failure: test_strings" in result.detail


@pytest.mark.parametrize(
    "after",
    [
        "\nThis function returns the sum of a and b.",
        "This adds them; it works for strings too.\nUse it as add(1, 2).\n",
    ],
)
def test_prose_after_a_fence_never_closed_is_not_code(after: str) -> None:
    """The prose ran as code (SyntaxError: 0 for a right answer), where the same prose
    after unfenced code, or after a closed fence, was left out."""
    result = graded(code_task(), f"Here it is:\n```python\n{ADD}{after}")
    assert result.score == 1.0, result.detail
    assert extract_code(f"```python {ADD}{after}") == ADD  # begun on the fence line


def test_a_nul_byte_in_the_prose_after_the_code_goes_with_the_prose() -> None:
    """ast.parse's error for a NUL byte gives no line: the prose holding one (a stray byte
    in a model's text) is still cut from the code after it, raw or in a fence never closed,
    as other prose is, not kept with the code as its SyntaxError."""
    assert extract_code(f"{ADD}\nThat is all.\x00") == ADD
    assert extract_code(f"Here:\n{ADD}Done \x00 ok") == ADD.rstrip("\n")
    assert extract_code(f"```python\n{ADD}This adds\x00 them.\n") == ADD


def test_a_closed_fence_runs_as_written_its_last_lines_too() -> None:
    """Only a fence never closed loses the prose after its code: a closed one is the code as
    the reply wrote it, so a Python 2 print after the function stays its SyntaxError."""
    assert extract_code(f"```python\n{ADD}print 'done'\n```") == f"{ADD}print 'done'\n"


def test_a_fence_cut_off_inside_a_function_is_still_a_syntax_error() -> None:
    """Only prose after the code is left out: a reply that ran out of tokens in its last
    function does not lose that function quietly."""
    cut = f"```python\n{ADD}\ndef sub(a, b):\n    return (a -"
    detail = graded(code_task(), cut).detail
    assert "SyntaxError" in detail and "never closed" in detail, detail
    in_its_body = "```python\ndef add(a, b):\n    total = a + b\n    return (total +"
    detail = graded(code_task(), in_its_body).detail  # not add() without its last line
    assert "SyntaxError" in detail and "never closed" in detail, detail
    # nor when it ran out in an import or a decorator after the function (a code line)
    for cut_line in ("from operator import (", "@functools.lru_cache(maxsize="):
        detail = graded(code_task(), f"```python\n{ADD}\n{cut_line}").detail
        assert "SyntaxError" in detail and "never closed" in detail, detail


def test_a_syntax_error_with_code_after_it_in_a_fence_never_closed_is_still_one() -> None:
    """A line that does not parse followed by more code (a Python 2 print between the
    imports and the function) was taken for prose after the code: the function after it
    was cut, so the reply failed with "NameError: name 'add' is not defined" instead of
    its SyntaxError, as the same block closed fails."""
    block = f"```python\nimport math\nprint 'adding'\n{ADD}"
    for output in (block, block + "```"):
        detail = graded(code_task(), output).detail
        assert "SyntaxError" in detail and "NameError" not in detail, detail


@pytest.mark.parametrize(
    "code",
    [
        f"{ADD}\na, b = map(int, input().split())\nprint(add(a, b))\n",  # at load time
        "def add(a, b):\n    input('Press enter')\n    return a + b\n",  # in each test
    ],
)
def test_code_that_reads_standard_input_scores_0_and_says_why(code: str) -> None:
    started = time.monotonic()
    result = graded(code_task(), f"```python\n{code}```")
    assert (result.score, result.error) == (0.0, None)
    assert "EOFError" in result.detail and "reads standard input" in result.detail
    assert time.monotonic() - started < 5.0  # nothing waits for input


def test_input_under_a_main_guard_does_not_count() -> None:
    guarded = f"{ADD}\nif __name__ == '__main__':\n    print(add(*map(int, input().split())))\n"
    assert graded(code_task(), f"```python\n{guarded}```").score == 1.0


def test_code_grader_wrong_code_and_no_code() -> None:
    assert graded(code_task(), "def add(a, b):\n    return a - b").score == 0.0
    syntax = graded(code_task(), "```python\ndef add(a, b) return a + b\n```")
    assert syntax.score == 0.0
    assert "SyntaxError" in syntax.detail
    missing = graded(code_task(), "   ")
    assert (missing.score, missing.detail) == (0.0, "no code in the output")


@pytest.mark.parametrize(
    "output",
    [
        '<pre><code class="language-python">def add(a, b):<br>    return a + b<br></code></pre>',
        "<pre><code>def add(a, b):<BR/>&nbsp;&nbsp;&nbsp;&nbsp;return a + b</code></pre>",
        '<pre><code class="language-python"><span class="hljs-keyword">def</span> '
        '<span class="hljs-title function_">add</span>(<span class="hljs-params">a, b</span>):\n'
        '    <span class="hljs-keyword">return</span> a + b\n</code></pre>',
        '<div class="highlight"><pre><span></span><span class="k">def</span> '
        '<span class="nf">add</span><span class="p">(</span>a, b<span class="p">):</span>\n'
        '    <span class="k">return</span> a <span class="o">+</span> b\n</pre></div>',
        '<code><span class="k">def</span> add(a, b): return a + b</code>',
    ],
)
def test_markup_inside_an_html_code_element_is_read_as_text(output: str) -> None:
    """`<br>` line breaks and syntax highlighting's `<span>` tags ran as code (SyntaxError, 0)."""
    result = graded(code_task(), output)
    assert result.score == 1.0, result.detail


def test_code_that_parses_keeps_what_looks_like_html_in_it() -> None:
    code = 'def add(a, b):\n    tag = "<span>"\n    return a + b if a<b or a>b else b + a\n'
    assert extract_code(f"<pre><code>{code}</code></pre>") == code
    box = f"<pre><div><div>Copy code</div><div><code>{code}</code></div></div></pre>"
    assert extract_code(box) == code  # the box's closing tags are no part of the code


def test_a_code_tag_named_in_prose_after_raw_code_is_no_code_element() -> None:
    """A `<code>` never closed is the tag named in prose, not a code element: read as one,
    the prose after it was graded as the code (SyntaxError, 0)."""
    output = f"Here it is:\n\n{ADD}\nOn a web page, put it in a <code> element.\nHope this helps!"
    assert extract_code(output) == ADD


@pytest.mark.parametrize(
    "output",
    [
        "`" * 100_000,  # no fence: each "```" used to scan to the end of the output
        "def f(:\n" * 20_000,  # used to parse every run of lines, one line shorter each time
        "Here:\ndef add(a, b):\n    return a + b\n" + "This is prose (\n" * 20_000,
        "(" * 100_000,  # the parser runs out of memory: not a grading failure
        "-" * 100_000,
        "(A) (B) " * 20_000,
        "<code>" * 100_000,  # never closed: each used to be searched to the end
        "<pre><code>" * 50_000,
        "<pre><div><code>" + "</code></div>" * 20_000 + "x",  # no closer is the content's last
        "`def a" * 100_000,
    ],
)
def test_code_extraction_is_fast_and_never_fails_on_degenerate_outputs(output: str) -> None:
    started = time.process_time()
    code = extract_code(output)
    assert time.process_time() - started < LINEAR_CPU_S
    assert code is not None
    if "def add" in output:
        assert code == "def add(a, b):\n    return a + b"


def test_infinite_loop_times_out_with_score_zero() -> None:
    started = time.perf_counter()
    result = graded(code_task(), "def add(a, b):\n    while True:\n        pass\n")
    assert result.score == 0.0
    assert result.error is None
    assert "timeout" in result.detail
    assert time.perf_counter() - started < FAST.timeout_s + 3


def test_the_cpu_limit_is_the_time_limit_rounded_up() -> None:
    """Below it (1 s of CPU for a 1.5 s limit), busy code would be killed as over its CPU
    time before its time was up, where the machine is idle (under load, the wall clock
    comes first and a timeout test does not see it)."""
    tests = (
        f"import resource\nassert resource.getrlimit(resource.RLIMIT_CPU)[0] >= {FAST.timeout_s}\n"
    )
    result = asyncio.run(run_python_tests(ADD, tests, FAST))
    assert (result.status, result.passed) == ("ok", 1), result.tests


def test_the_code_runs_with_its_process_count_limited_and_no_core_dumps() -> None:
    """Neither limit is reached by a test here (fork is refused, and root passes the
    process count), so running without them passed every test: the code reads them."""
    tests = (
        "import resource\nassert resource.getrlimit(resource.RLIMIT_NPROC) == (7, 7)\n"
        "assert resource.getrlimit(resource.RLIMIT_CORE) == (0, 0)\n"
    )
    limits = FAST.model_copy(update={"max_processes": 7})
    result = asyncio.run(run_python_tests(ADD, tests, limits))
    assert (result.status, result.passed) == ("ok", 2), result.tests


def test_a_timeout_or_crash_says_where_the_code_was() -> None:
    looping = "def add(a, b):\n    while a == -1:\n        pass\n    return a + b\n"
    detail = graded(code_task(), looping).detail
    assert "in the test line 4: assert add(-1, 1) == 0 (1 test passed before it)" in detail
    at_load = graded(code_task(), "while True:\n    pass\n").detail
    assert "still running after 1.5 s while running the code, before any test" in at_load
    exiting = "import os\ndef add(a, b):\n    return a + b\ndef plus(a, b):\n    os._exit(3)\n"
    tests = "assert add(1, 2) == 3\ndef test_plus():\n    assert plus(1, 2) == 3\n"
    crashed = graded(code_task(tests), exiting).detail
    assert "before the tests finished, in the test test_plus (1 test passed before it)" in crashed
    failing_first = "assert add(1, 1) == 3\n" + tests  # a failed test is not counted passed
    crashed = graded(code_task(failing_first), exiting).detail
    assert "in the test test_plus (1 test passed before it)" in crashed


def test_huge_print_is_capped_and_does_not_fail_the_code() -> None:
    code = (
        "import os, sys\nprint('x' * 20_000_000)\nsys.stderr.write('e' * 5_000_000)\n"
        "os.write(1, b'z' * 3_000_000)\ndef add(a, b):\n    return a + b\n"
    )
    result = asyncio.run(run_python_tests(code, ADD_TESTS, FAST))
    assert (result.status, result.passed, result.total) == ("ok", 4, 4)
    assert len(result.stdout) <= FAST.output_bytes
    assert len(result.stderr) <= FAST.output_bytes
    assert result.stdout.startswith("xxxx")


def test_the_output_is_kept_up_to_the_limit_asked_for() -> None:
    """The huge-print test reads a cap at or below the default: the harness capping at
    64,000 bytes whatever output_bytes said passed every test."""
    limits = FAST.model_copy(update={"output_bytes": 100_000})
    result = asyncio.run(run_python_tests(f"print('x' * 150_000)\n{ADD}", ADD_TESTS, limits))
    assert (result.status, len(result.stdout)) == ("ok", 100_000)


def test_a_file_the_code_writes_is_cut_at_the_file_size_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file size limit is all that keeps code from filling the disk from its working
    folder: a write past it fails with an error the code may catch (not a kill)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    code = (
        "import os\ntry:\n    with open('big.bin', 'wb') as out:\n"
        "        out.write(b'y' * 3_000_000)\n    ERROR = None\n"
        "except OSError as error:\n    ERROR = error.strerror\n"
        "SIZE = os.path.getsize('big.bin')\n"
    )
    tests = "assert ERROR == 'File too large'\nassert SIZE < 3_000_000\n"
    result = asyncio.run(run_python_tests(code, tests, FAST))
    assert (result.status, result.passed, result.total) == ("ok", 2, 2), result.detail


@pytest.mark.parametrize(
    "setup",
    [
        "sys.stdout.reconfigure(encoding='utf-8')",
        "sys.stdout = io.TextIOWrapper(sys.stdout.buffer, encoding='utf-8', write_through=True)",
        "sys.stdout.buffer.write('hé\\n'.encode())",
        "assert sys.stdout.encoding.lower() == 'utf-8'",
        "sys.stdout = open(1, 'w', encoding='utf-8', closefd=False)",  # by its descriptor
    ],
)
def test_code_may_use_the_standard_output_as_a_real_stream(setup: str) -> None:
    # the usual idioms for UTF-8 or fast output; each used to fail the whole answer
    result = asyncio.run(
        run_python_tests(f"import io, sys\n{setup}\nprint('hé')\n{ADD}", ADD_TESTS, FAST)
    )
    assert (result.status, result.passed) == ("ok", 4), result.detail
    assert result.stdout.endswith("hé\n")


def test_endless_printing_times_out() -> None:
    result = graded(code_task(), "def add(a, b):\n    while True:\n        print('spam' * 100)\n")
    assert result.score == 0.0
    assert "timeout" in result.detail


@pytest.mark.parametrize("isolation", ["auto", "hook"])
def test_opening_a_socket_is_blocked(isolation: str) -> None:
    code = (
        "import socket\ndef add(a, b):\n"
        "    socket.create_connection(('127.0.0.1', 9), timeout=1).close()\n    return a + b\n"
    )
    limits = FAST.model_copy(update={"network_isolation": isolation})
    result = graded(code_task(), code, sandbox=limits)
    assert result.score == 0.0
    assert "not allowed" in result.detail


def test_network_namespace_when_available() -> None:
    code = "def add(a, b):\n    return a + b\n"
    result = asyncio.run(run_python_tests(code, ADD_TESTS, FAST))
    assert result.network_isolation in {"unshare", "hook"}
    if result.network_isolation == "hook":
        pytest.skip("unprivileged user namespaces are not available here: audit hook only")
    # /proc/net follows the reader's network namespace: only loopback inside the sandbox
    probe = (
        "lines = open('/proc/net/dev').read().splitlines()[2:]\n"
        "INTERFACES = sorted(line.split(':')[0].strip() for line in lines)\n"
    )
    host_lines = Path("/proc/net/dev").read_text().splitlines()[2:]
    if sorted(line.split(":")[0].strip() for line in host_lines) == ["lo"]:
        pytest.skip("this machine has no network interface to hide")
    checked = asyncio.run(run_python_tests(probe, "assert INTERFACES == ['lo'], INTERFACES\n"))
    assert checked.passed == 1, checked.tests
    hook_asked = FAST.model_copy(update={"network_isolation": "hook"})
    assert asyncio.run(run_python_tests(code, ADD_TESTS, hook_asked)).network_isolation == "hook"


def test_a_network_namespace_asked_for_where_none_can_be_made_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """network_isolation='unshare' where `unshare --user --net` fails raises, saying what
    to ask instead: running with the audit hook alone passed every test (unshare works
    here, so the probe is made to fail); 'auto' falls back to the hook."""
    monkeypatch.setattr(sandbox_module, "_unshare_works", lambda python: False)
    asked = FAST.model_copy(update={"network_isolation": "unshare"})
    with pytest.raises(RuntimeError, match=r"does not work here; use 'auto' or 'hook'$"):
        asyncio.run(run_python_tests(ADD, ADD_TESTS, asked))
    assert asyncio.run(run_python_tests(ADD, ADD_TESTS, FAST)).network_isolation == "hook"


def test_memory_hog_is_stopped() -> None:
    result = graded(
        code_task(), "def add(a, b):\n    big = bytearray(2 * 1024 ** 3)\n    return a + b"
    )
    assert result.score == 0.0
    assert "MemoryError" in result.detail
    at_import = graded(code_task(), "hog = [0] * (10 ** 9)\ndef add(a, b):\n    return a + b")
    assert at_import.score == 0.0
    assert "MemoryError" in at_import.detail
    # the limit is memory_mb: twice it is refused (bytes(n) maps zeroed pages without using
    # them, so it costs nothing where it is allowed), a quarter of it runs
    for megabytes, score in ((2 * FAST.memory_mb, 0.0), (FAST.memory_mb // 4, 1.0)):
        sized = f"def add(a, b):\n    block = bytes({megabytes} * 1024 ** 2)\n    return a + b\n"
        assert graded(code_task(), sized).score == score, megabytes


def test_fork_bomb_and_subprocesses_are_refused() -> None:
    before = set(os.listdir("/proc"))
    bomb = graded(code_task(), "import os\nwhile True:\n    os.fork()\n")
    assert bomb.score == 0.0
    assert "os.fork is not allowed" in bomb.detail
    spawn = graded(code_task(), "import subprocess\nsubprocess.run(['sleep', '30'])\n")
    assert spawn.score == 0.0
    assert "not allowed" in spawn.detail
    direct = "import _posixsubprocess\n_posixsubprocess.fork_exec(['sleep', '30'])\n"
    assert "starting a process is not allowed" in graded(code_task(), direct).detail
    spawn_call = "import os\nos.posix_spawn('/bin/true', ['true'], {})\n"
    assert "os.posix_spawn is not allowed" in graded(code_task(), spawn_call + ADD).detail
    replaced = "import os\nos.execv('/bin/true', ['true'])\n"  # the harness replaced
    assert "os.exec is not allowed" in graded(code_task(), replaced + ADD).detail
    assert not [pid for pid in set(os.listdir("/proc")) - before if _is_sandbox(pid)]


def test_a_fenced_block_indented_inside_a_list_item_is_dedented() -> None:
    output = "1. Define it:\n\n   ```python\n   def add(a, b):\n       return a + b\n   ```\n"
    result = graded(code_task(), output)
    assert result.score == 1.0, result.detail


@pytest.mark.parametrize(
    ("code", "refused"),
    [
        ("import os, signal\nos.kill(os.getppid(), signal.SIGTERM)\n", "os.kill"),
        ("import ctypes\n", "importing ctypes"),
        # a named semaphore is a file in /dev/shm, outside the working folder
        ("import multiprocessing\nLOCK = multiprocessing.Lock()\n", "importing _multiprocessing"),
    ],
)
def test_signals_and_ctypes_are_refused(code: str, refused: str) -> None:
    result = graded(code_task(), code + "def add(a, b):\n    return a + b\n")
    assert result.score == 0.0
    assert f"{refused} is not allowed" in result.detail  # and this process is still here


def test_code_killed_by_a_signal_scores_zero_not_a_grading_error() -> None:
    code = "import signal, time\nsignal.alarm(1)\ntime.sleep(5)\n"  # no handler: SIGALRM kills
    result = graded(code_task(), code, sandbox=FAST.model_copy(update={"timeout_s": 4.0}))
    assert (result.score, result.error) == (0.0, None)
    assert "killed by signal SIGALRM" in result.detail
    # the CPU limit's signal, raised by the code itself so as not to spend the CPU time
    over_cpu = graded(code_task(), "import signal\nsignal.raise_signal(signal.SIGXCPU)\n")
    assert "crashed: killed: CPU time limit exceeded" in over_cpu.detail
    # a real-time signal has no name of its own: its number
    unnamed = graded(code_task(), "import signal\nsignal.raise_signal(signal.SIGRTMIN + 1)\n")
    assert f"crashed: killed by signal {signal.SIGRTMIN + 1}, " in unnamed.detail


def test_importing_subprocess_or_asyncio_is_allowed() -> None:
    """They import _posixsubprocess; only starting a process is refused."""
    for module in ("asyncio", "subprocess"):
        result = graded(code_task(), f"import {module}\ndef add(a, b):\n    return a + b\n")
        assert result.score == 1.0, result.detail


def test_code_may_run_an_event_loop_but_no_socket_of_its_own() -> None:
    """An event loop wakes itself through a local socket pair; a socket that could connect
    anywhere, even a local one, stays refused."""
    code = (
        "import asyncio\nasync def add_later(a, b):\n    await asyncio.sleep(0)\n"
        "    return a + b\ndef add(a, b):\n    return asyncio.run(add_later(a, b))\n"
    )
    result = graded(code_task(), code)
    assert result.score == 1.0, result.detail
    local = "import socket\nsocket.socket(socket.AF_UNIX).connect('/run/any.sock')\n"
    assert "socket.connect is not allowed" in graded(code_task(), local + ADD).detail
    for family in ("", "socket.AF_INET6"):
        internet = f"import socket\nsocket.socket({family})\n"
        assert "socket.__new__ is not allowed" in graded(code_task(), internet + ADD).detail


def test_code_replacing_time_sleep_does_not_make_the_sandbox_spin() -> None:
    """The harness's watch on its parent slept through time.sleep: made a no-op (answers do
    it to skip their own waits), the watch ran flat out, and its CPU counted against the
    code's limits."""
    code = "import time\nreal_sleep = time.sleep\ntime.sleep = lambda seconds: None\n" + ADD
    tests = (
        "import time\nstarted = time.process_time()\nreal_sleep(1.5)\n"
        "assert time.process_time() - started < 0.1\n"  # a spinning watch: 0.3 s and more
    )
    limits = FAST.model_copy(update={"timeout_s": 4.0})
    result = asyncio.run(run_python_tests(code, tests, limits))
    assert (result.status, result.passed) == ("ok", 1), result.tests


def _is_sandbox(pid: str, parent_pid: int | None = None) -> bool:
    """A sandbox process started by this test process (or by parent_pid) that is alive."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return False
    return b"harness.py" in cmdline and parent == (parent_pid or os.getpid())


def test_the_code_reads_none_of_the_grading_processs_standard_input(tmp_path: Path) -> None:
    """The code's stdin is empty, not the grading process's own: when collecting from a
    terminal, an input() in the code would wait on the user's keys, and take them."""
    script = (
        "import asyncio\n"
        "from fugu_lite.sandbox import SandboxLimits, run_python_tests\n"
        "result = asyncio.run(run_python_tests('import sys\\nREAD = sys.stdin.read()\\n',"
        " 'print(repr(READ))\\n', SandboxLimits(timeout_s=10)))\n"
        "print(result.status, result.stdout.strip())\n"
    )
    env = os.environ | {"TMPDIR": str(tmp_path)}
    grader = subprocess.run(
        [sys.executable, "-c", script],
        input="the grader's own input\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert grader.stdout.strip() == "ok ''", grader.stderr


def test_the_sandbox_dies_with_a_killed_grading_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """...and the folder it left in the system temp folder goes with the next sandbox run
    (it stayed in /tmp for good)."""
    script = (
        "import asyncio\n"
        "from fugu_lite.sandbox import SandboxLimits, run_python_tests\n"
        "asyncio.run(run_python_tests('import time\\ntime.sleep(1000)\\n', 'assert True\\n',"
        " SandboxLimits(timeout_s=600)))\n"
    )
    env = os.environ | {"TMPDIR": str(tmp_path)}
    grader = subprocess.Popen([sys.executable, "-c", script], env=env)
    deadline = time.monotonic() + 60
    sandbox: list[str] = []
    while not sandbox:
        assert time.monotonic() < deadline, "no sandbox process started"
        time.sleep(0.05)
        sandbox = [pid for pid in os.listdir("/proc") if _is_sandbox(pid, grader.pid)]
    grader.kill()  # kill -9: no cleanup code runs in the grading process
    grader.wait()
    deadline = time.monotonic() + 10
    while _running(sandbox[0]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(sandbox[0]), "the sandbox outlived the process that started it"
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert graded(code_task(), "def add(a, b):\n    return a + b").score == 1.0
    folder = tmp_path / f"fugu-lite-{os.getuid()}"
    assert [path.name for path in tmp_path.iterdir()] == [folder.name]
    assert list(folder.iterdir()) == []


def test_a_sandbox_run_removes_killed_runs_folders_not_live_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = tmp_path / f"fugu-lite-{os.getuid()}"
    folder.mkdir(mode=0o700)
    someone_elses = tmp_path / ".X0.tmp.abcdefgh.tmp"  # another program's, in /tmp itself
    someone_elses.write_text("x")
    live_writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = folder / writer_temporary("sandbox", finished_pid())
    live = folder / writer_temporary("sandbox", live_writer.pid)
    try:
        for leftover in (dead, live):
            leftover.mkdir()
            (leftover / "solution.py").write_text("x = 1\n")
        two_days_ago = time.time() - 2 * 24 * 3600
        for path in (someone_elses, live):
            os.utime(path, (two_days_ago, two_days_ago))
        assert graded(code_task(), "def add(a, b):\n    return a + b").score == 1.0
    finally:
        live_writer.kill()
        live_writer.wait()
    assert not dead.exists()
    assert list(folder.iterdir()) == [live]  # a run still grading keeps its folder
    assert someone_elses.exists()


DEEPER_THAN_THE_RECURSION_LIMIT = sys.getrecursionlimit() + 200


def _nest_folders(folder: Path, depth: int) -> None:
    """Folders nested `depth` deep in `folder`, made relative to each other as code in the
    sandbox can (chdir, then mkdir), so no path is ever longer than the system allows."""
    handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=handle)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=handle)
            os.close(handle)
            handle = inner
    finally:
        os.close(handle)


def test_code_nesting_folders_deeper_than_the_recursion_limit_is_graded_and_cleared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Removing its folder raised RecursionError: an error, not a score, for the answer."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    kept = tmp_path / "kept"  # linked to from inside: the link goes, not what it names
    kept.mkdir()
    (kept / "data.txt").write_text("x")
    nesting = (
        f"import os\nos.symlink({str(kept)!r}, 'link')\n"
        f"for _ in range({DEEPER_THAN_THE_RECURSION_LIMIT}):\n"
        "    os.mkdir('d')\n    os.chdir('d')\n"
    )
    result = graded(code_task(), nesting + ADD, sandbox=FAST.model_copy(update={"timeout_s": 5}))
    assert (result.score, result.error) == (1.0, None)
    assert list((tmp_path / f"fugu-lite-{os.getuid()}").iterdir()) == []
    assert (kept / "data.txt").exists()


def test_a_killed_runs_folder_nested_deeper_than_the_recursion_limit_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """...and sweeping it up raised RecursionError in every later run, which could then
    grade no code at all."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = tmp_path / f"fugu-lite-{os.getuid()}"
    folder.mkdir(mode=0o700)
    dead = folder / writer_temporary("sandbox", finished_pid())
    dead.mkdir()
    _nest_folders(dead, DEEPER_THAN_THE_RECURSION_LIMIT)
    (dead / "d" / "solution.py").write_text("x = 1\n")
    assert graded(code_task(), ADD).score == 1.0
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("taken_as", ["symlink", "folder of another user", "file"])
def test_a_temp_folder_name_taken_by_someone_else_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, taken_as: str
) -> None:
    """Another user can make fugu-lite-UID first in a shared /tmp, e.g. as a symlink to a
    folder of theirs: the sandbox must neither write there nor fail."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    name = tmp_path / f"fugu-lite-{os.getuid()}"
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    if taken_as == "symlink":
        name.symlink_to(theirs)
    elif taken_as == "file":
        name.write_text("")
    else:
        if os.getuid() != 0:
            pytest.skip("giving a folder to another user needs root")
        theirs = name
        theirs.mkdir(mode=0o777)
        os.chown(theirs, 65534, 65534)
    assert graded(code_task(), "def add(a, b):\n    return a + b").score == 1.0
    assert list(theirs.iterdir()) == []
    assert f"{name} is not a private folder of this user" in caplog.text


def test_the_temp_folder_is_made_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = tmp_path / f"fugu-lite-{os.getuid()}"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)  # made by hand, say
    assert graded(code_task(), "def add(a, b):\n    return a + b").score == 1.0
    assert folder.stat().st_mode & 0o777 == 0o700


def _running(pid: str) -> bool:
    """Alive and not a zombie waiting for its new parent to reap it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.mark.parametrize(
    "making",
    [
        "os.open(TARGET, os.O_CREAT)",  # read-only flags, yet it creates the file
        "open('mine.txt', 'w').close()\nos.link('mine.txt', TARGET)",  # a hard link to it there
        # a name relative to a folder outside, opened read-only (dir_fd), not to the working one
        "os.open('made', os.O_WRONLY | os.O_CREAT, dir_fd=OUTSIDE)",
        "os.mkdir('made', dir_fd=OUTSIDE)",
        "os.mkfifo('made', dir_fd=OUTSIDE)",
        "os.symlink('anywhere', 'made', dir_fd=OUTSIDE)",
        "open('mine.txt', 'w').close()\nos.rename('mine.txt', 'made', dst_dir_fd=OUTSIDE)",
        "open('mine.txt', 'w').close()\nos.replace('mine.txt', 'made', dst_dir_fd=OUTSIDE)",
        "open('mine.txt', 'w').close()\nos.link('mine.txt', 'made', dst_dir_fd=OUTSIDE)",
        # the module os takes them from, past os's checking stand-ins
        "import posix\nposix.open('made', os.O_WRONLY | os.O_CREAT, dir_fd=OUTSIDE)",
        "import posix\nposix.mkfifo(TARGET)",
        "import posix\nposix.mknod(TARGET)",
    ],
)
def test_a_file_made_outside_the_working_folder_by_an_os_call_is_refused(
    making: str, tmp_path: Path
) -> None:
    """Only open()'s modes and O_WRONLY were tried: writes read from os.open's flags without
    O_CREAT, os.link checked on its source alone, or a name judged against the working folder
    where dir_fd named another, passed every test, and made the file."""
    target = str(tmp_path / "made")
    outside = f"OUTSIDE = os.open({str(tmp_path)!r}, os.O_RDONLY)"
    code = f"import os\nTARGET = {target!r}\n{outside}\n{making}\n{ADD}"
    result = graded(code_task(), code)
    assert result.score == 0.0
    assert "not allowed" in result.detail
    assert not os.path.lexists(target)


def test_file_writes_outside_the_working_folder_are_refused(tmp_path) -> None:
    target = tmp_path / "written.txt"
    code = f"open({str(target)!r}, 'w').write('x')\ndef add(a, b):\n    return a + b\n"
    result = graded(code_task(), code)
    assert result.score == 0.0
    assert "only the working folder is writable" in result.detail
    assert not target.exists()
    local = "open('scratch.txt', 'w').write('x')\ndef add(a, b):\n    return a + b\n"
    assert graded(code_task(), local).score == 1.0
    beside = "open('../work.txt', 'w').write('x')\n"  # a name starting as the folder's does
    assert "only the working folder is writable" in graded(code_task(), beside + ADD).detail
    created = tmp_path / "created.txt"  # mode 'x' creates a file as 'w' does
    exclusive = f"open({str(created)!r}, 'x').write('x')\n"
    assert "only the working folder is writable" in graded(code_task(), exclusive + ADD).detail
    assert not created.exists()
    kept = tmp_path / "kept.txt"  # moved into the working folder: gone from where it was
    kept.write_text("x")
    moving_in = f"import os\nos.rename({str(kept)!r}, 'kept.txt')\n"
    assert "outside the working folder" in graded(code_task(), moving_in + ADD).detail
    assert kept.exists()
    silenced = "import os, sys\nsys.stdout = open(os.devnull, 'w')\nprint('quiet')\n"
    assert graded(code_task(), silenced + ADD).score == 1.0


def test_a_sqlite_database_outside_the_working_folder_is_refused(tmp_path: Path) -> None:
    """SQLite opens its files itself, raising no "open" event: code connecting to a
    database outside the working folder (`sqlite3.connect('/tmp/app.db')`) made it there,
    past the refusal of writes outside the folder. One in memory or in the folder is the
    code's to use."""
    target = str(tmp_path / "app.db")
    uri = f"file:{target}?mode=rwc"
    # each database as the code writes it, and as the refusal names it
    for database, named in [
        (repr(target), repr(target)),
        (f"pathlib.Path({target!r})", repr(Path(target))),
        (repr(uri), repr(uri)),
    ]:
        connect = f"sqlite3.connect({database}, uri=True).execute('create table t(x)')\n"
        result = graded(code_task(), f"import pathlib, sqlite3\n{connect}{ADD}")
        assert result.score == 0.0
        assert f"sqlite3.connect to {named} outside the working folder" in result.detail
        assert not Path(target).exists()
    allowed = "".join(
        f"sqlite3.connect({name!r}, uri=True).execute('create table t(x)')\n"
        for name in (":memory:", "local.db", "file::memory:?cache=shared", "file:mine.db")
    )
    assert graded(code_task(), f"import sqlite3\n{allowed}{ADD}").score == 1.0


@pytest.mark.parametrize(
    "writing", ["ATTACH DATABASE {target!r} AS other", "VACUUM INTO {target!r}"]
)
def test_attach_or_vacuum_into_a_file_outside_the_working_folder_is_refused(
    writing: str, tmp_path: Path
) -> None:
    """SQLite opens the file ATTACH and VACUUM INTO name itself, with no audit event: code
    connected to a database in memory (or in the folder) wrote `/tmp/copy.db` past the
    refusal of sqlite3.connect outside the working folder. Inside the folder they work."""
    target = str(tmp_path / "other.db")
    for connected in (
        "sqlite3.connect(':memory:')",
        "sqlite3.connect('local.db')",
        "sqlite3.Connection(':memory:')",  # the class itself, not connect()
        "sqlite3.connect(':memory:', factory=sqlite3.Connection.__base__)",
    ):
        sql = writing.format(target=target)
        code = f"import sqlite3\n{connected}.execute({sql!r})\n{ADD}"
        result = graded(code_task(), code)
        assert result.score == 0.0
        assert f"{target!r} outside the working folder is not allowed" in result.detail
        assert not os.path.lexists(target)
    inside = "".join(
        f"db = sqlite3.connect({database!r})\ndb.execute('create table t(x)')\n"
        f"db.execute(\"ATTACH DATABASE 'mine{n}.db' AS other\")\n"
        f"db.execute(\"VACUUM INTO 'copy{n}.db'\")\n"
        for n, database in enumerate((":memory:", "local.db"))
    )
    # the class connect() gives (an `assert` of the code's own is left out when graded)
    inside += "if not isinstance(db, sqlite3.Connection):\n    raise TypeError(type(db))\n"
    assert graded(code_task(), f"import sqlite3\n{inside}{ADD}").score == 1.0


@pytest.mark.parametrize("factory", ["", ", sqlite3.Connection"])
def test_a_connection_opened_with_its_arguments_by_position_is_a_sqlite3_connection(
    factory: str,
) -> None:
    """The factory is connect()'s sixth argument: given the first five by position, the
    connection is still of the class sqlite3.Connection names; given the factory too, it is
    not given twice."""
    code = (
        f"import sqlite3\ndb = sqlite3.connect(':memory:', 5.0, 0, '', True{factory})\n"
        "if not isinstance(db, sqlite3.Connection):\n    raise TypeError(type(db))\n"
    )
    assert graded(code_task(), code + ADD).score == 1.0


def test_the_harness_runs_on_a_python_built_without_sqlite(tmp_path: Path) -> None:
    """The harness imported _sqlite3 unguarded: on a Python built without SQLite every run
    failed at start, so every code answer was a grading error."""
    workdir = sandbox_module._write_files(tmp_path, ADD, ADD_TESTS)
    harness = tmp_path / "harness.py"
    without_sqlite = "import sys\nsys.modules['_sqlite3'] = None\n"
    harness.write_text(without_sqlite + harness.read_text(encoding="utf-8"), encoding="utf-8")
    command = sandbox_module._harness_command(tmp_path, FAST, sys.executable, "hook")
    finished = subprocess.run(command, cwd=workdir, capture_output=True, timeout=30)
    (tmp_path / "stdout").write_bytes(finished.stdout)
    (tmp_path / "stderr").write_bytes(finished.stderr)
    result = collect_results(tmp_path, finished.returncode, False, FAST)
    assert (result.status, result.passed, result.total) == ("ok", 4, 4), result.detail


def test_a_fifo_or_a_device_node_outside_the_working_folder_is_refused(tmp_path: Path) -> None:
    """os.mkfifo and os.mknod raise no audit event: code making a named pipe or a node
    outside the working folder (os.mkfifo('/tmp/pipe')) made it there. In the folder, they
    are the code's to make."""
    for make in ("mkfifo", "mknod"):
        target = str(tmp_path / make)
        result = graded(code_task(), f"import os\nos.{make}({target!r})\n{ADD}")
        assert result.score == 0.0
        assert f"os.{make} on {target!r} outside the working folder" in result.detail
        assert not os.path.lexists(target)
    made_here = "import os\nos.mkfifo('pipe')\nos.mknod('node')\n"
    assert graded(code_task(), made_here + ADD).score == 1.0


@pytest.mark.parametrize(
    "changing",
    [
        "os.remove('kept', dir_fd=OUTSIDE)",
        "os.rmdir('kept_folder', dir_fd=OUTSIDE)",
        "shutil.rmtree('kept_folder', dir_fd=OUTSIDE)",
        "os.chmod('kept', 0o777, dir_fd=OUTSIDE)",
        "os.chown('kept', -1, -1, dir_fd=OUTSIDE)",
        "os.utime('kept', (0, 0), dir_fd=OUTSIDE)",
    ],
)
def test_a_file_outside_named_through_dir_fd_is_neither_removed_nor_changed(
    changing: str, tmp_path: Path
) -> None:
    (tmp_path / "kept").write_text("x")
    (tmp_path / "kept_folder").mkdir()
    outside = f"OUTSIDE = os.open({str(tmp_path)!r}, os.O_RDONLY)"
    result = graded(code_task(), f"import os, shutil\n{outside}\n{changing}\n{ADD}")
    assert result.score == 0.0
    assert f"in {str(tmp_path)!r} (its dir_fd) outside the working folder" in result.detail
    assert (tmp_path / "kept").exists() and (tmp_path / "kept_folder").is_dir()


@pytest.mark.parametrize(
    "changing", ["os.chmod(KEPT, 0o777)", "os.utime(KEPT, (0, 0))", "os.chown(KEPT, -1, -1)"]
)
def test_a_file_outside_named_by_a_read_only_descriptor_is_not_changed(
    changing: str, tmp_path: Path
) -> None:
    """os.chmod(fd) and os.utime(fd) change the file a descriptor opened read-only (allowed
    anywhere) is on: an fd was taken as inside the working folder, and /tmp/x changed."""
    kept = tmp_path / "kept"
    kept.write_text("x")
    kept.chmod(0o600)
    opened = f"KEPT = os.open({str(kept)!r}, os.O_RDONLY)"
    result = graded(code_task(), f"import os\n{opened}\n{changing}\n{ADD}")
    assert result.score == 0.0
    assert f"{str(kept)!r} outside the working folder is not allowed" in result.detail
    assert kept.stat().st_mode & 0o777 == 0o600 and kept.stat().st_mtime > 0


@pytest.mark.parametrize(
    ("changing", "refused"),
    [
        ("os.truncate(KEPT, 0)", "os.truncate on {kept}"),
        ("os.open(KEPT, os.O_RDONLY | os.O_TRUNC)", "os.open writing {kept}"),  # empties it
        # a hard link in the folder to a file outside: writing it would write that file
        ("os.link(KEPT, 'linked')", "os.link on {kept}"),
        ("os.link('kept', 'linked', src_dir_fd=OUTSIDE)", "os.link on 'kept' in {folder}"),
        ("os.rename('kept', 'moved', src_dir_fd=OUTSIDE)", "os.rename on 'kept' in {folder}"),
        # refused at once, not passed to onerror as each removal inside would be
        ("shutil.rmtree(KEPT_FOLDER, ignore_errors=True)", "shutil.rmtree on {kept_folder}"),
        (
            "shutil.rmtree('kept_folder', dir_fd=OUTSIDE, ignore_errors=True)",
            "shutil.rmtree on 'kept_folder' in {folder}",
        ),
        ("shutil.move(KEPT, 'moved')", "shutil.move on {kept}"),
        ("shutil.move('mine', MADE)", "shutil.move on {made}"),
        ("shutil.copyfile('mine', MADE)", "shutil.copyfile on {made}"),
        # os.chflags exists on BSD and macOS only: its event, raised as os.chflags would
        ("sys.audit('os.chflags', KEPT, 0)", "os.chflags on {kept}"),
    ],
)
def test_each_checked_call_on_a_file_outside_the_working_folder_is_refused_by_name(
    changing: str, refused: str, tmp_path: Path
) -> None:
    """Each call the sandbox checks, made on a file outside the working folder, is refused
    naming the call and the file, and leaves it as it was."""
    kept, kept_folder, made = tmp_path / "kept", tmp_path / "kept_folder", tmp_path / "made"
    kept.write_text("x")
    kept_folder.mkdir()
    names = {"KEPT": kept, "KEPT_FOLDER": kept_folder, "MADE": made}
    setup = "".join(f"{name} = {str(path)!r}\n" for name, path in names.items())
    setup += f"OUTSIDE = os.open({str(tmp_path)!r}, os.O_RDONLY)\nopen('mine', 'w').close()\n"
    result = graded(code_task(), f"import os, shutil, sys\n{setup}{changing}\n{ADD}")
    paths = {name.lower(): repr(str(path)) for name, path in names.items()}
    refused = refused.format(folder=f"{str(tmp_path)!r} (its dir_fd)", **paths)
    assert result.score == 0.0
    assert f"{refused} outside the working folder is not allowed" in result.detail
    assert kept.read_text() == "x" and kept_folder.is_dir() and not made.exists()


def test_each_checked_call_on_a_file_in_the_working_folder_is_the_codes_to_make() -> None:
    calls = [
        "open('kept', 'w').write('x')",
        "os.mkdir('folder')",
        "os.makedirs('.', exist_ok=True)",  # the working folder itself
        "os.chmod('.', 0o700)",
        "os.chmod('kept', 0o600)",
        "os.chown('kept', -1, -1)",
        "os.utime('kept', (0, 0))",
        "os.truncate('kept', 0)",
        "os.link('kept', 'linked')",
        "os.symlink('kept', 'pointing')",
        "os.rename('linked', 'renamed')",
        "os.remove('renamed')",
        "shutil.copyfile('kept', 'copied')",
        "shutil.move('copied', 'folder')",
        "shutil.rmtree('folder')",
        "os.mkdir('empty')",
        "os.rmdir('empty')",
        "sys.audit('os.chflags', 'kept', 0)",
    ]
    code = "import os, shutil, sys\n" + "\n".join(calls) + "\n"
    code += "if sorted(os.listdir('.')) != ['kept', 'pointing']:\n"
    code += "    raise OSError(os.listdir('.'))\n"
    assert graded(code_task(), code + ADD).score == 1.0


@pytest.mark.parametrize(
    "changing",
    [
        "os.setxattr(KEPT, 'user.added', b'1')",
        "os.removexattr(KEPT, 'user.kept')",
        "os.setxattr(os.open(KEPT, os.O_RDONLY), 'user.added', b'1')",  # by a descriptor
        "os.removexattr(os.open(KEPT, os.O_RDONLY), 'user.kept')",
    ],
)
def test_extended_attributes_of_a_file_outside_the_working_folder_are_not_changed(
    changing: str, tmp_path: Path
) -> None:
    """os.setxattr and os.removexattr raised audit events the sandbox did not check: code
    setting or removing an extended attribute of /tmp/x changed it there. In the folder,
    they are the code's to change."""
    kept = tmp_path / "kept"
    kept.write_text("x")
    try:
        os.setxattr(kept, "user.kept", b"1")
    except OSError:
        pytest.skip("this file system keeps no user extended attributes")
    result = graded(code_task(), f"import os\nKEPT = {str(kept)!r}\n{changing}\n{ADD}")
    assert result.score == 0.0
    assert f"{str(kept)!r} outside the working folder is not allowed" in result.detail
    assert os.listxattr(kept) == ["user.kept"]
    here = "open('mine', 'w').close()\nos.setxattr('mine', 'user.added', b'1')\n"
    here += "os.removexattr('mine', 'user.added')\n"
    assert graded(code_task(), f"import os\n{here}{ADD}").score == 1.0


def test_names_relative_to_the_working_folder_opened_as_dir_fd_are_the_codes_to_write(
    tmp_path: Path,
) -> None:
    here = "import os, shutil\nHERE = os.open('.', os.O_RDONLY)\n"
    here += "os.close(os.open('made', os.O_WRONLY | os.O_CREAT, dir_fd=HERE))\n"
    here += "os.mkdir('folder', dir_fd=HERE)\nos.rename('made', 'moved', dst_dir_fd=HERE)\n"
    # reading through a folder outside stays allowed, as reading by its whole path is
    (tmp_path / "readable").write_text("x")
    outside = f"OUTSIDE = os.open({str(tmp_path)!r}, os.O_RDONLY)\n"
    here += outside + "print(os.read(os.open('readable', os.O_RDONLY, dir_fd=OUTSIDE), 1))\n"
    # shutil.rmtree removes through dir_fd (safe from symlink attacks) only when
    # os.supports_dir_fd lists os.open: it must list the sandbox's stand-in
    here += "if not shutil.rmtree.avoids_symlink_attacks:\n    raise OSError('unsafe rmtree')\n"
    assert graded(code_task(), here + ADD).score == 1.0


def test_the_code_does_not_see_the_grading_processs_environment(monkeypatch) -> None:
    # a pool's API keys are in fugu-lite's environment: the code (and what it prints) must
    # not have them
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    tests = "import os\nassert 'OPENAI_API_KEY' not in os.environ\nassert add(1, 2) == 3\n"
    assert graded(code_task(tests), ADD).score == 1.0


def test_code_that_fails_to_load_fails_each_test_by_name() -> None:
    """Code raising at load runs no test: each one is reported failed and not run, the test
    functions too (a load error listing only the asserts passed every test)."""
    result = asyncio.run(run_python_tests("raise ValueError('broken')\n", ADD_TESTS, FAST))
    assert (result.status, result.passed, result.total) == ("load_error", 0, 4)
    assert [(test.name, test.passed, test.error) for test in result.tests] == [
        (name, False, "not run") for name in ("line 3", "line 4", "test_floats", "test_strings")
    ]


def test_exiting_early_is_the_models_fault() -> None:
    exit_call = graded(code_task(), "import sys\nsys.exit(0)")
    assert (exit_call.score, "SystemExit" in exit_call.detail) == (0.0, True)
    hard_exit = graded(code_task(), "import os\ndef add(a, b):\n    os._exit(0)\n")
    assert hard_exit.score == 0.0
    assert "crashed: the process exited (code 0) before the tests finished" in hard_exit.detail


def test_a_function_under_another_name_says_what_the_code_defines() -> None:
    result = graded(code_task(), "import math\ndef plus(a, b):\n    return a + b\n")
    assert result.score == 0.0
    assert "name 'add' is not defined" in result.detail
    assert "the code defines plus(), not add()" in result.detail
    nothing = graded(code_task(), "x = 1\n")
    assert "the code defines no function" in nothing.detail
    typo = graded(code_task(), "def add(a, b):\n    return a + c\n")  # the code's own
    assert "name 'c' is not defined" in typo.detail
    assert "the code defines" not in typo.detail
    raised = graded(code_task("def test_x():\n    raise NameError('no such thing')\n"), ADD)
    assert "NameError: no such thing" in raised.detail  # not a missing name: no hint
    assert "the code defines" not in raised.detail


@pytest.mark.parametrize(
    ("imported", "used", "module"),
    [
        ("from math import isclose", "math.isclose(add(0.1, 0.2), 0.3)", "math"),
        # the dotted module bound under another name: `xml` itself is not
        (
            "import xml.etree.ElementTree as ET",
            "add(xml.etree.ElementTree.XML('<a/>').tag, 'b')",
            "xml",
        ),
    ],
)
def test_a_module_the_tests_use_but_neither_imports_is_not_named_as_a_call(
    imported: str, used: str, module: str
) -> None:
    """Tests relying on the code's import of a module (`math.isclose(...)` after the code's
    `from math import isclose`) said "the code defines add(), not math()": the tests call no
    math()."""
    result = graded(code_task(f"assert {used}\n"), f"{imported}\n{ADD}")
    assert result.score == 0.0
    hint = f"name {module!r} is not defined (the tests use {module}, which neither they nor"
    assert hint in result.detail
    assert "the code defines" not in result.detail


def test_a_lone_surrogate_in_the_answer_is_graded_not_a_grading_failure() -> None:
    # a JSON reply may hold "\ud83d" (half an emoji), which UTF-8 cannot encode
    commented = graded(code_task(), ADD.replace("a + b", "a + b  # \ud83d"))
    assert (commented.score, commented.error) == (1.0, None)
    in_text = "def add(a, b):\n    assert len('\ud83d') == 1\n    return a + b\n"
    assert graded(code_task(), in_text).score == 1.0
    assert graded(code_task(), "def add(a, b):\n    return a \ud83d b\n").score == 0.0


@pytest.mark.parametrize("module", ["numpy", "no_such_module_xyz"])
def test_importing_a_package_says_the_sandbox_has_the_standard_library_only(module: str) -> None:
    result = graded(code_task(), f"import {module}\n{ADD}")
    assert result.score == 0.0
    assert f"No module named '{module}'" in result.detail
    assert "the sandbox runs the standard library only" in result.detail
    assert graded(code_task(), f"import json, collections.abc\n{ADD}").score == 1.0


def test_sandbox_failure_of_our_own_is_an_error_not_a_zero() -> None:
    broken = FAST.model_copy(update={"python": "/nonexistent/python3"})
    result = graded(code_task(), "def add(a, b):\n    return a + b", sandbox=broken)
    assert result.score is None
    assert "could not start the sandbox" in (result.error or "")


def test_a_sandbox_that_does_not_start_within_its_time_limit_says_so(tmp_path: Path) -> None:
    """Not "failed before running the code (exit -9)": the machine was too slow, the code no
    part of it."""
    slow_python = tmp_path / "python3"
    slow_python.write_text("#!/bin/sh\nsleep 5\n")
    slow_python.chmod(0o755)
    limits = FAST.model_copy(
        update={"python": str(slow_python), "timeout_s": 0.5, "network_isolation": "hook"}
    )
    result = graded(code_task(), ADD, sandbox=limits)
    assert result.score is None
    assert "did not start within the time limit" in (result.error or "")


def test_a_sandbox_failing_before_the_code_shows_the_end_of_its_error_output(
    tmp_path: Path,
) -> None:
    # a traceback names its error last; what comes first may be warnings, noise
    failing_python = tmp_path / "python3"
    failing_python.write_text(
        "#!/bin/sh\nyes noise | head -c 5000 >&2\necho broken here >&2\nexit 1\n"
    )
    failing_python.chmod(0o755)
    limits = FAST.model_copy(update={"python": str(failing_python), "network_isolation": "hook"})
    result = asyncio.run(run_python_tests(ADD, ADD_TESTS, limits))
    assert result.status == "internal_error"
    assert result.detail.startswith("the sandbox failed before running the code (exit 1): ")
    assert result.detail.endswith("broken here")
    assert (result.passed, result.total, result.tests) == (0, 0, [])  # no test it never ran


def test_concurrent_sandboxes_all_finish() -> None:
    async def many() -> list[Grade]:
        good = "def add(a, b):\n    return a + b"
        return await asyncio.gather(*(grade(code_task(), good, sandbox=FAST) for _ in range(6)))

    assert [g.score for g in asyncio.run(many())] == [1.0] * 6


def test_the_tests_own_failing_import_is_a_grading_error_not_a_zero() -> None:
    tests = "import numpy as np\nassert np.isclose(add(1, 2), 3)\n"
    result = graded(code_task(tests), f"```python\n{ADD}```")
    assert result.score is None
    assert "the task's tests cannot run in the sandbox" in (result.error or "")
    assert "line 1" in (result.error or "") and "No module named 'numpy'" in (result.error or "")
    blocked = graded(code_task("import ctypes\nassert add(1, 2) == 3\n"), ADD)
    assert blocked.score is None and "importing ctypes is not allowed" in (blocked.error or "")
    # the tests importing a name the code does not define: the code's fault
    own = graded(
        code_task("from solution import add\nassert add(1, 2) == 3\n"),
        "def plus(a, b):\n    return a + b\n",
    )
    assert (own.score, own.error) == (0.0, None)
    assert graded(code_task("from solution import add\nassert add(1, 2) == 3\n"), ADD).score == 1.0
    assert graded(code_task("import solution\nassert solution.add(1, 2) == 3\n"), ADD).score == 1.0


def test_a_long_error_keeps_its_end_where_the_error_is_named() -> None:
    # a syntax error's text starts with its line of code, which may run on for thousands of
    # characters; its kind and message come last
    long_line = "TABLE = [" + "1, " * 1_000 + "]]\n"
    result = graded(code_task(), f"```python\n{long_line}{ADD}```")
    assert result.score == 0.0
    assert "SyntaxError: unmatched ']'" in result.detail


def test_a_lone_surrogate_in_the_codes_error_can_be_saved_with_the_grade() -> None:
    # the detail goes to the call log as UTF-8: half a surrogate pair used to make that fail
    raising = "def add(a, b):\n    raise ValueError('bad ' + chr(0xD800))\n"
    result = graded(code_task(), raising)
    assert result.score == 0.0
    assert "ValueError: bad \\ud800" in result.detail
    assert '"score":0.0' in result.model_dump_json()


def test_the_codes_own_top_level_asserts_do_not_decide_its_score() -> None:
    # a wrong example check of the model's used to fail every test of a right function
    own_checks = f"{ADD}\nassert add(2, 2) == 5\nassert add(1, 1) == 2\n"
    assert graded(code_task(), f"```python\n{own_checks}```").score == 1.0
    inside = (
        "def add(a, b):\n    assert a != 1, 'not one'\n    return a + b\n"  # the code's own logic
    )
    kept = graded(code_task(), inside)
    assert (kept.score, "AssertionError: not one" in kept.detail) == (0.75, True)
    syntax = graded(code_task(), "def add(a, b) return a + b\n")
    assert "SyntaxError" in syntax.detail and "solution.py" in syntax.detail


def test_the_codes_own_loop_over_its_examples_does_not_decide_its_score() -> None:
    """A loop over the model's own examples ran at load: one it got wrong failed every test."""
    examples = (
        f"{ADD}\n# Test cases\ncases = [((1, 2), 3), ((2, 2), 5)]\n"
        "for args, expected in cases:\n    assert add(*args) == expected, f'add{args}'\n"
        "print('All tests passed!')\n"
    )
    assert graded(code_task(), examples).score == 1.0
    counting = "i = 0\nwhile i < 3:\n    assert add(i, 0) == i + 1\n    i += 1\n"
    assert graded(code_task(), f"{ADD}\n{counting}").score == 1.0
    loading = "TABLE = {}\nfor i in range(3):\n    TABLE[i] = i\n"  # no check: run
    uses = "def add(a, b):\n    return a + b if len(TABLE) == 3 else None\n"
    assert graded(code_task(), loading + uses).score == 1.0


def test_a_call_of_the_codes_own_test_function_does_not_decide_its_score() -> None:
    """`test_add()` at the end of the code ran its checks at load, a wrong one failing all."""
    own_test = "def test_add():\n    assert add(2, 2) == 5\n\ntest_add()\n"
    assert graded(code_task(), f"{ADD}\n{own_test}").score == 1.0
    called_with = "def test_value(x):\n    assert x\n    return x\n\nFIRST = test_value(1)\n"
    assert graded(code_task(), f"{ADD}\n{called_with}").score == 1.0  # a value: still run
    # a test* function without an assert is no check: its call still runs
    setting_up = "def testing_setup():\n    global PLUS\n    PLUS = lambda a, b: a + b\n\n"
    plus = "testing_setup()\ndef add(a, b):\n    return PLUS(a, b)\n"
    assert graded(code_task(), setting_up + plus).score == 1.0
    # one called with arguments, which pytest never calls so, is no check either: it runs
    given = "def test_with(op):\n    assert op\n    global PLUS\n    PLUS = op\n\n"
    plus_given = "test_with(lambda a, b: a + b)\ndef add(a, b):\n    return PLUS(a, b)\n"
    assert graded(code_task(), given + plus_given).score == 1.0


@pytest.mark.parametrize(
    "run_own_tests",
    [
        "unittest.main()",
        "unittest.main(argv=[''], verbosity=2)",
        "import unittest as ut\nut.main()",
        "from unittest import main as run_tests\nrun_tests()",
    ],
)
def test_the_codes_own_unittest_run_does_not_decide_its_score(run_own_tests: str) -> None:
    """unittest.main() at the end of the code, outside a main guard, looked for tests in the
    harness's module, found none, and exited: a right function scored 0 (SystemExit: True)."""
    own_tests = (
        "import unittest\n\nclass TestAdd(unittest.TestCase):\n"
        "    def test_example(self):\n        self.assertEqual(add(2, 2), 5)\n\n"
    )
    result = graded(code_task(), f"{ADD}\n{own_tests}{run_own_tests}\n")
    assert (result.score, result.detail) == (1.0, "4/4 tests passed")


OWN_TEST_CASE = (
    "import unittest\n\nclass TestAdd(unittest.TestCase):\n"
    "    def test_example(self):\n        self.assertEqual(add(2, 2), 5)\n\n"
)


@pytest.mark.parametrize(
    "own_checks",
    [
        "try:\n    assert add(2, 2) == 5\nfinally:\n    print('checked')\n",
        "try:\n    assert add(2, 2) == 5\nexcept AssertionError:\n    print('wrong')\n    raise\n",
        "import contextlib\nwith contextlib.suppress(TypeError):\n    assert add(2, 2) == 5\n",
        "def test_add():\n    assert add(2, 2) == 5\n\n"
        "try:\n    test_add()\nexcept TypeError:\n    pass\n",
        "if True:\n    for a in range(3):\n        assert add(a, 0) == a + 1\n",
        f"{OWN_TEST_CASE}RUN_TESTS = True\nif RUN_TESTS:\n    unittest.main()\n",
        f"{OWN_TEST_CASE}if __name__ == '__main__':\n    pass\nelse:\n    unittest.main()\n",
    ],
)
def test_the_codes_own_checks_inside_a_top_level_if_try_or_with_do_not_decide_its_score(
    own_checks: str,
) -> None:
    """An assert of the code's own, a call of its test function or unittest.main() inside a
    top-level try, with or if ran at load as a bare one would: one wrong failed every test."""
    result = graded(code_task(), f"{ADD}\n{own_checks}")
    assert (result.score, result.detail) == (1.0, "4/4 tests passed")


def test_the_rest_of_a_top_level_try_holding_an_own_check_still_runs() -> None:
    setting_up = (
        "try:\n    from operator import add as PLUS\n    assert PLUS(2, 2) == 5\n"
        "except ImportError:\n    PLUS = None\nelse:\n    READY = True\n"
    )
    uses = "def add(a, b):\n    return PLUS(a, b) if READY else None\n"
    result = graded(code_task(), setting_up + uses)
    assert (result.score, result.detail) == (1.0, "4/4 tests passed")


def test_a_main_of_the_codes_own_still_runs_beside_unittest() -> None:
    program = "import unittest\n\ndef main():\n    raise SystemExit('main ran')\n\nmain()\n"
    assert "SystemExit: main ran" in graded(code_task(), ADD + program).detail


def test_code_may_use_its_own_file_name_as_a_script_does() -> None:
    """`__file__` was not defined: the usual script preamble raised NameError at load."""
    preamble = (
        "import os, sys\nHERE = os.path.dirname(os.path.abspath(__file__))\n"
        "sys.path.insert(0, HERE)\nOWN = open(__file__, encoding='utf-8').read()\n"
    )
    tests = "assert add(1, 2) == 3\nassert 'def add' in OWN\n"
    result = graded(code_task(tests), preamble + ADD)
    assert result.score == 1.0, result.detail


@pytest.mark.parametrize(
    "reading",
    [
        "import sys\nLIMIT = int(sys.argv[1]) if len(sys.argv) > 1 else 10\n",
        "import argparse\nparser = argparse.ArgumentParser()\n"
        "parser.add_argument('--limit', type=int, default=10)\nARGS = parser.parse_args()\n",
    ],
)
def test_code_reading_its_command_line_sees_a_script_run_without_arguments(reading: str) -> None:
    """sys.argv held the harness's (its folder, its limits as JSON), so a script's command
    line read at load, int(sys.argv[1]) or argparse's parse_args(), failed a right function."""
    tests = "import os, sys\nassert [os.path.basename(a) for a in sys.argv] == ['solution.py']\n"
    result = graded(code_task(ADD_TESTS + tests), reading + ADD)
    assert (result.score, result.detail) == (1.0, "5/5 tests passed")


@pytest.mark.parametrize("call", ["exit(1)", "quit()"])
def test_exit_and_quit_exit_as_in_python_not_a_name_error(call: str) -> None:
    # `site` defines them and the sandbox's `python -S` skips it
    code = f"def add(a, b):\n    if a == -1:\n        {call}\n    return a + b\n"
    result = graded(code_task(), code)
    assert result.score == 0.75
    assert "line 4: assert add(-1, 1) == 0: SystemExit" in result.detail
    assert "NameError" not in result.detail


def test_indentation_mixing_tabs_and_spaces_is_read_when_only_one_reading_parses() -> None:
    mixed = "def add(a, b):\n    total = a\n\treturn total + b\n"  # a tab of 4 columns
    assert graded(code_task(), f"```python\n{mixed}```").score == 1.0
    assert graded(code_task(), mixed).score == 1.0
    literal = "def add(a, b):\n    sep = '\t'\n\treturn a + b if sep == '\t' else None\n"
    assert graded(code_task(), literal).score == 1.0  # a tab inside a line stays a tab
    # `\treturn r` is in the function at 4 columns, in the if at 8: no guess, the code's error
    ambiguous = "def add(a, b):\n    r = a + b\n    if a == -1:\n        r = 0\n\treturn r\n"
    result = graded(code_task(), f"```python\n{ambiguous}```")
    assert result.score == 0.0
    assert "TabError" in result.detail


def test_asserts_in_a_loop_over_cases_count_as_a_test() -> None:
    # the loop ran as set-up, its failure unseen: code wrong on every case there scored 1.0
    tests = (
        "CASES = [(1, 2, 3), (5, 5, 10)]\nfor a, b, c in CASES:\n    assert add(a, b) == c\n"
        "assert add(2, 2) == 4\n"
    )
    wrong_on_cases = graded(code_task(tests), "def add(a, b):\n    return 4\n")
    assert wrong_on_cases.score == 0.5
    assert "first failure: line 2: for a, b, c in CASES:" in wrong_on_cases.detail
    assert graded(code_task(tests), ADD).score == 1.0
    run = asyncio.run(run_python_tests(ADD, tests, FAST))  # a loop named by its first line
    assert [test.name for test in run.tests] == [
        "line 2: for a, b, c in CASES:",
        "line 4: assert add(2, 2) == 4",
    ]
    helper = "def check(f):\n    assert f(1, 2) == 3\nassert add(2, 2) == 4\n"  # defines only
    assert graded(code_task(helper), ADD).detail == "1/1 tests passed"
    named = "def testAdd():\n    assert add(1, 2) == 3\n"  # test*, as pytest collects it
    assert graded(code_task(named), ADD).detail == "1/1 tests passed"


def test_a_name_a_failed_set_up_line_would_have_set_is_not_blamed_on_the_code() -> None:
    # the hint used to say "the code defines add(), not result()"
    tests = "result = add(1, 2)\nassert result == 3\nassert add(2, 2) == 4\n"
    raising = "def add(a, b):\n    if a == 1:\n        raise ValueError('one')\n    return a + b\n"
    result = graded(code_task(tests), raising)
    assert result.score == 0.5
    expected = "'result' is not defined (the tests' set-up line 1, which sets it, raised ValueError"
    assert expected in result.detail
    assert "the code defines" not in result.detail


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("from solution import add", "add"),  # the code named it plus
        ("from solution import add as total", "total"),
        ("import solution.helpers", "solution"),  # a dotted import sets its first name
        ("class Case:\n    result = plus(1, 2)", "Case"),
        ("def expected(result=plus(1, 2)):\n    return result", "expected"),
    ],
)
def test_a_name_a_failed_import_class_or_def_would_have_set_names_that_line(
    setting: str, named: str
) -> None:
    """A set-up line that imports, or defines a class or a function, and raised: the names
    it would have set are blamed on it, not on the code's naming."""
    tests = f"{setting}\nassert {named} is not None\n"
    result = graded(code_task(tests), "def plus(a, b):\n    raise ValueError('one')\n")
    assert result.score == 0.0, result.error
    blamed = f"name {named!r} is not defined (the tests' set-up line 1, which sets it"
    assert blamed in result.detail


def test_a_test_function_whose_def_line_raised_names_that_line_not_a_key_error() -> None:
    # a default argument calling the code runs on the def line: it used to read KeyError
    tests = "def test_plus(total=plus(1, 2)):\n    assert total == 3\n"
    raising = "def plus(a, b):\n    raise ValueError('one')\n"
    run = asyncio.run(run_python_tests(raising, tests, FAST))
    assert [(test.name, test.passed) for test in run.tests] == [("test_plus", False)]  # once
    result = graded(code_task(tests), raising)
    assert result.score == 0.0, result.error
    blamed = "test_plus: name 'test_plus' is not defined (the tests' set-up line 1, which sets it"
    assert blamed in result.detail
    assert "raised ValueError: one" in result.detail
    redefined = "test_plus = plus(1, 2)\ndef test_plus():\n    assert True\n"  # set later: runs
    assert graded(code_task(redefined), "def plus(a, b):\n    raise ValueError\n").score == 1.0


def test_code_may_set_its_own_stack_limit_but_not_raise_a_hard_limit() -> None:
    # a competitive-programming idiom for deep recursion; every setrlimit used to be refused
    stack = (
        "import resource\n_, hard = resource.getrlimit(resource.RLIMIT_STACK)\n"
        "resource.setrlimit(resource.RLIMIT_STACK, (hard, hard))\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))\n"
        # a finite hard limit kept as it is (the stack's may be unlimited here): no raise
        "resource.setrlimit(resource.RLIMIT_AS, resource.getrlimit(resource.RLIMIT_AS))\n"
    )
    assert graded(code_task(), stack + ADD).score == 1.0
    unlimited = "import resource\nM = resource.RLIM_INFINITY\n"
    for name in ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_NPROC"):
        raising = f"{unlimited}resource.setrlimit(resource.{name}, (M, M))\n{ADD}"
        result = graded(code_task(), raising)
        assert result.score == 0.0
        assert "raising a hard resource limit is not allowed" in result.detail
    # below 0 but not RLIM_INFINITY (-1): a limit as large as an unsigned number holds
    below_zero = f"import resource\nresource.setrlimit(resource.RLIMIT_CPU, (-2, -2))\n{ADD}"
    assert "raising a hard resource limit is not allowed" in graded(code_task(), below_zero).detail


@pytest.mark.parametrize(
    "reading",
    [
        "import sys\ndata = sys.stdin.read().split()\nprint(add(int(data[0]), int(data[1])))\n",
        "from sys import stdin\nn = int(stdin.readline())\n",
        "a, b = map(int, open(0).read().split())\n",
    ],
)
def test_code_reading_empty_standard_input_at_load_says_why(reading: str) -> None:
    # sys.stdin.read() gives "", and the error (IndexError, ValueError) said nothing of it
    result = graded(code_task(), f"{ADD}{reading}")
    assert result.score == 0.0
    assert "the code reads standard input, which is empty when graded" in result.detail
    other = graded(code_task(), f"{ADD}x = [][0]\n")  # no input read: no such hint
    assert "IndexError" in other.detail and "standard input" not in other.detail


def test_no_break_spaces_indenting_the_code_are_read_as_spaces() -> None:
    nbsp = "\u00a0" * 4
    indented = f"def add(a, b):\n{nbsp}s = '\u00a0'\n{nbsp}return a + b\n"
    assert graded(code_task(), f"```python\n{indented}```").score == 1.0
    assert graded(code_task(), indented).score == 1.0
    listed = "1. Here:\n\n" + "".join(f"{nbsp}{line}\n" for line in ADD.splitlines())
    assert graded(code_task(), listed).score == 1.0
    in_text = "def add(a, b):\n    return a +\u00a0b\n"  # not indentation: still the code's error
    assert "U+00A0" in graded(code_task(), f"```python\n{in_text}```").detail


def test_an_import_a_test_function_cannot_do_is_a_grading_error_not_a_zero() -> None:
    tests = (
        "assert add(1, 2) == 3\ndef test_close():\n    import numpy\n    assert add(1, 1) == 2\n"
    )
    result = graded(code_task(tests), ADD)
    assert result.score is None
    assert "the test test_close raised ModuleNotFoundError: No module named 'numpy'" in (
        result.error or ""
    )
    # the code's own failing import, reached from a test, stays the code's 0
    code = "def add(a, b):\n    import numpy\n    return a + b\n"
    own = graded(code_task("def test_plain():\n    assert add(1, 1) == 2\n"), code)
    assert (own.score, own.error) == (0.0, None)
    # as does a name the code lacks, imported from it by a test function
    lacking = "def test_sub():\n    from solution import sub\n    assert sub(2, 1) == 1\n"
    missing = graded(code_task(lacking), ADD)
    assert (missing.score, missing.error) == (0.0, None)


def test_no_more_sandboxes_run_at_once_than_max_concurrent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each run's folder is made in the user's temp folder (here in tmp_path, which no other
    # run shares) and removed when the run ends, so a run's code sees the runs in flight as
    # the folders beside its own
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    code = "import os\nIN_FLIGHT = len(os.listdir(os.path.join(os.getcwd(), '..', '..')))\n"
    limits = FAST.model_copy(update={"max_concurrent": 1})

    async def three_at_once() -> list[SandboxResult]:
        runs = (run_python_tests(code, "print(IN_FLIGHT)\n", limits) for _ in range(3))
        return await asyncio.gather(*runs)

    results = asyncio.run(three_at_once())
    assert [(r.status, r.stdout.strip()) for r in results] == [("ok", "1")] * 3, results


def test_a_run_stopped_after_its_last_test_says_so(tmp_path: Path) -> None:
    """Killed or timed out past its last test's result, before the harness's "done" (its
    watch ending it as the grading process died, results.jsonl at the file size limit), a run
    was said to be in its last step; read from a results file written here, as the harness
    writes it, since no code can be timed to stop just there."""
    events = [
        {"event": "ready", "total": 1},
        {"event": "start", "where": "the test test_add"},
        {"event": "test", "name": "test_add", "passed": True},
    ]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    killed = collect_results(tmp_path, -9, False, SandboxLimits())
    assert (killed.status, killed.detail) == (
        "crashed",
        "killed by signal SIGKILL, after the tests",
    )
    timed_out = collect_results(tmp_path, -9, True, SandboxLimits(timeout_s=2))
    assert (timed_out.status, timed_out.detail) == (
        "timeout",
        "still running after 2 s after the tests",
    )


def test_a_run_killed_in_a_test_counts_the_tests_passed_before_it(tmp_path: Path) -> None:
    """Only the tests that passed are counted, in the plural but for one; read from a
    results file written as the harness writes it."""
    ready, failed = {"event": "ready", "total": 3}, {"event": "test", "name": "a", "passed": False}
    passed = {"event": "test", "name": "b", "passed": True}
    for done, count in [([failed], "0 tests"), ([failed, passed], "1 test")]:
        events = [ready, *done, {"event": "start", "where": "the test c"}]
        (tmp_path / "results.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
        result = collect_results(tmp_path, -9, False, SandboxLimits())
        said = f"killed by signal SIGKILL, in the test c ({count} passed before it)"
        assert (result.status, result.detail) == ("crashed", said)


def test_lines_of_the_results_file_that_are_no_event_are_passed_over(tmp_path: Path) -> None:
    """The code runs in the harness's process and can write to its results.jsonl: a line
    there that is JSON but no object (a list, a text), or that is no UTF-8, is passed over
    as a line that is no JSON is; reading each as an event passed every test."""
    events = [
        {"event": "ready", "total": 1},
        {"event": "test", "name": "test_add", "passed": True},
        {"event": "done"},
    ]
    first, *rest = (json.dumps(event).encode() for event in events)
    lines = [first, b"[1, 2]", b'"text"', b'{"event": "\xff"}', *rest]
    (tmp_path / "results.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    result = collect_results(tmp_path, 0, False, SandboxLimits())
    assert (result.status, result.detail, result.total) == ("ok", "1/1 tests passed", 1)


def test_a_failed_import_of_the_tests_is_a_grading_error_though_the_run_then_timed_out(
    tmp_path: Path,
) -> None:
    """The tests' own import failing (numpy, absent here) is the task's fault whatever the
    code does next; a code that then hung in a test was scored a timeout's 0 by a verdict
    reading the time limit first. Read from a results file written as the harness writes it."""
    events = [
        {"event": "ready", "total": 1},
        {"event": "start", "where": "the tests' set-up line 1"},
        {"event": "setup_error", "line": 1, "error": "ModuleNotFoundError", "tests_import": True},
        {"event": "start", "where": "the test test_add"},
    ]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    result = collect_results(tmp_path, -9, True, SandboxLimits(timeout_s=2))
    assert (result.status, result.detail) == (
        "tests_error",
        "line 1 of the tests raised ModuleNotFoundError",
    )
