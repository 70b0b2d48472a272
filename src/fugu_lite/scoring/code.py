"""The code grader: the Python in the output (fenced blocks, or raw, dedented when the reply
indents it as a markdown code block) runs against `task.tests` in the sandbox (see
sandbox.py); score = fraction of tests passed. An infinite loop, a crash or a refused
operation is the model's fault: 0 with the reason in `detail`.
"""

from __future__ import annotations

import ast
import html
import re
import textwrap

from ..sandbox import SandboxLimits, run_python_tests
from ..tasks import Task
from .common import Grade, cannot_grade, wrong

# The info string holds no backtick (as in CommonMark): "`" * 100_000 is no fence, and
# rejecting it takes linear time.
FENCE = re.compile(
    r"```[ \t]*(?P<language>[\w+#.-]*)(?P<info>[^\n`]*)\n(?P<code>.*?)(?:(?P<close>```)|\Z)",
    re.DOTALL,
)
_PYTHON_TAGS = {"python", "py", "python3", "py3"}
_LANGUAGE_LINE = re.compile(r"\A\s*(?:python|py)3?[ \t]*\r?\n", re.IGNORECASE)
_CODE_START = re.compile(r"^[ \t]*(?:def |class |import |from |@|async def )", re.MULTILINE)
_DEFINITION_START = re.compile(r"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+\w+", re.MULTILINE)
_INLINE_DEF = re.compile(r"\b(?:async[ \t]+)?(?:def|class)[ \t]+\w+[ \t]*[(:]")
"""A definition after prose on its line: "Here is the code: def add(a, b):"."""
_INDENT = re.compile("^[ \t\u00a0]+", re.MULTILINE)


def extract_code(output: str) -> str | None:
    """The Python in a reply: fenced python blocks that parse (joined, with untagged blocks
    that define a function or class), else untagged blocks (those that define one, if any
    does), else the raw code. Without a fence, HTML code elements are read as blocks."""
    if not output.strip():
        return None
    fenced = _fenced_code(output)
    return fenced if fenced is not None else _raw_code(output)


def _fenced_code(output: str) -> str | None:
    """The code of the reply's fenced blocks (see extract_code); None when it has no block,
    only blocks in another language, or only blocks of output beside raw code that defines
    a function or class."""
    blocks = _fenced_blocks(output) or _html_blocks(output) or _inline_definitions(output)
    candidates = _candidate_blocks(blocks)
    if not candidates:
        return None
    # blocks of output only ("three", ">>> add(1, 2)") beside a function written raw; a block
    # with a definition that does not parse (Python 2's print) is code with its error
    holding_code = [c for c in candidates if _states_something(c) or _DEFINITION_START.search(c)]
    if not holding_code and _defines(_raw_code(output)):
        return None
    parsing = [code for code in candidates if _parses(code)]
    # the model's own pytest tests cannot run in the sandbox (standard library only)
    solution = [code for code in parsing if not _imports_pytest(code)]
    parsing = solution or parsing
    return "\n\n".join(parsing) if parsing else candidates[-1]


def _fenced_blocks(output: str) -> list[tuple[str, str]]:
    """Each fenced block's language and code; a fence never closed without the prose the
    reply went on with after its code."""
    blocks = []
    for match in FENCE.finditer(output):
        language, code = _block(match["language"], match["info"], match["code"])
        blocks.append((language, code if match["close"] else _without_prose_after(code)))
    return blocks


# a one-line definition in inline code: "`def add(a, b): return a + b`", also between two or
# three backticks ("``def ...``", "```def ...```": a one-line fence is no fence)
_INLINE_CODE_DEFINITION = re.compile(
    r"(?<!`)(?P<ticks>`{1,3})(?!`)"
    r"(?P<code>[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+\w+[^`\n]*)(?P=ticks)(?!`)"
)


def _inline_definitions(output: str) -> list[tuple[str, str]]:
    """The definitions a reply without a code block gives in inline code, as untagged blocks."""
    return [("", match["code"].strip()) for match in _INLINE_CODE_DEFINITION.finditer(output)]


_HTML_OPENER = re.compile(r"<(?P<tag>pre|code)\b(?P<attrs>[^<>]*)>", re.IGNORECASE)
_HTML_CLOSERS = {"pre": re.compile(r"</pre>", re.I), "code": re.compile(r"</code>", re.I)}
# a `<pre>`'s `<code>`: at its start, or after a chat page's markup on its line, the code box
# that models trained on saved chat pages (ShareGPT's) write: `<pre><div><div>python</div>
# <div>Copy code</div><div><code>...</code></div></div></pre>`
_HTML_INNER_CODE = re.compile(r"\s*(?:<[^\n]*?)?<code\b(?P<attrs>[^<>]*)>", re.IGNORECASE)
_HTML_CLOSING_TAGS = re.compile(r"(?:\s*</\w+>)*\s*")
_HTML_LANGUAGE = re.compile(r"\blang(?:uage)?-(?P<language>[\w+#.-]+)", re.IGNORECASE)
_HTML_LANG_ATTRIBUTE = re.compile(r"\blang\s*=\s*[\"']?(?P<language>[\w+#.-]+)", re.IGNORECASE)
_HTML_CLASS = re.compile(
    r"\bclass\s*=\s*(?:\"(?P<quoted>[^\"]*)\"|'(?P<single>[^']*)'|(?P<bare>[^\s\"'<>=`]+))", re.I
)


def _html_blocks(output: str) -> list[tuple[str, str]]:
    """Each HTML code element's language and code, as some chat models answer without a
    fence: a `<pre>` (a `<code>` inside it or not; never closed when the reply was cut off)
    and a `<code>` that holds a line break or starts with a definition or import (not a
    name mentioned in prose), as text (see `_html_text`)."""
    last_code_closer = max((m.start() for m in _HTML_CLOSERS["code"].finditer(output)), default=-1)
    blocks: list[tuple[str, str]] = []
    position = 0
    while (opener := _HTML_OPENER.search(output, position)) is not None:
        tag = opener["tag"].lower()
        position = opener.end()
        if tag == "code" and position > last_code_closer:  # never closed: no block
            continue
        closer = _HTML_CLOSERS[tag].search(output, position)
        code = output[position : closer.start() if closer else len(output)]
        attrs = opener["attrs"]
        position = closer.end() if closer else len(output)
        if tag == "pre" and (inner := _HTML_INNER_CODE.match(code)) is not None:
            # the <code>'s language, else the <pre>'s: `<pre class="language-python"><code>`
            attrs, code = (
                f"{inner['attrs']} {attrs}",
                _without_the_code_closer(code[inner.end() :]),
            )
        code = _html_text(code)
        if tag == "code" and "\n" not in code.strip() and not _CODE_START.match(code.strip()):
            continue
        language, code = _block(_html_language(attrs), "", code)
        blocks.append((language, code if closer else _without_prose_after(code)))
    return blocks


def _html_language(attrs: str) -> str:
    """The language an HTML code element's attributes name, "" for none: a class
    `language-python` or `lang-py` (Prism's, highlight.js's), else a `lang` attribute
    (GitHub's `<pre lang="python">`), else a class that is a python tag (`class="python"`,
    highlight.js 9's `class="hljs python"`; other classes are styling, not languages)."""
    tagged = _HTML_LANGUAGE.search(attrs) or _HTML_LANG_ATTRIBUTE.search(attrs)
    if tagged is not None:
        return tagged["language"]
    for attribute in _HTML_CLASS.finditer(attrs):
        classes = (attribute["quoted"] or attribute["single"] or attribute["bare"] or "").split()
        if named := [name for name in classes if name.lower() in _PYTHON_TAGS]:
            return named[0]
    return ""


def _without_the_code_closer(code: str) -> str:
    """A `<pre>`'s `<code>` content less its `</code>` and the closing tags of the box around
    it (`</code></div></div>`); as written when no `</code>` is last (a reply cut off)."""
    closers = list(_HTML_CLOSERS["code"].finditer(code))
    if closers and _HTML_CLOSING_TAGS.fullmatch(code, closers[-1].end()):
        return code[: closers[-1].start()]
    return code


# markup inside a code element, as chat UIs and syntax highlighters write it: "<br>" for a
# line break, '<span class="k">def</span>' around a token (attributes are name="value", so
# the comparison "a<b and c>d" is no tag)
_HTML_LINE_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
_HTML_TAG = re.compile(
    r"</?[A-Za-z][A-Za-z0-9]*(?:\s+[\w:-]+\s*=\s*(?:\"[^\"]*\"|'[^']*'|[^\s\"'<>=`]+))*\s*/?>"
)


def _html_text(code: str) -> str:
    """The text of an HTML code element: its entities unescaped (`&lt;` is `<`), and when it
    does not parse so, its tags dropped and each `<br>` a line break (code that parses with
    what looks like a tag, `s = "<span>"`, keeps it)."""
    text = html.unescape(code)
    if not _HTML_TAG.search(code) or _parses(text):
        return text
    return html.unescape(_HTML_TAG.sub("", _HTML_LINE_BREAK.sub("\n", code)))


def _without_prose_after(code: str) -> str:
    """`code` that does not parse cut to its longest run of lines that parses, when the line
    after that run is prose ("This function returns ..."), unindented, and no definition
    follows; else `code` (a reply cut off inside a function, or a line of Python 2 before
    more code, keeps its syntax error)."""
    if _parses(code):
        return code
    lines = code.split("\n")
    end = len(lines)
    while end > 0 and (error_line := _syntax_error_line("\n".join(lines[:end]))) is not None:
        end = min(end, error_line) - 1  # one parse per error, as in _raw_code
    rest = [line for line in lines[end:] if line.strip()]
    head = "\n".join(lines[:end])
    if not head.strip() or not rest or rest[0][0].isspace() or _CODE_START.match(rest[0]):
        return code
    if _DEFINITION_START.search("\n".join(rest)):  # "print 'x'" then a def: the code's error
        return code
    return head.rstrip() + "\n"


def _candidate_blocks(blocks: list[tuple[str, str]]) -> list[str]:
    """The code of the python blocks with the untagged blocks that define something, or of
    the untagged blocks when none is tagged python (those that define something, if any
    does: output shown in a block, "Fizz", parses, as a name that raises NameError)."""
    blocks = _python_tagged_otherwise_as_untagged(blocks)
    if not any(language in _PYTHON_TAGS for language, _ in blocks):
        untagged = [code for language, code in blocks if not language]
        if not any(_defines(code) for code in untagged):
            return untagged
        # a step-by-step reply's block of imports or constants goes with its function
        return [code for code in untagged if _states_something(code)]
    # "```\ndef add(...)```" then "```python\nprint(add(2, 3))```"
    return [
        code
        for language, code in blocks
        if language in _PYTHON_TAGS or (not language and _defines(code))
    ]


def _python_tagged_otherwise_as_untagged(blocks: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """`blocks` with those of each other language read as untagged when one of them is
    Python that defines a function or class: their tag names no programming language
    (`text`, `console`, HTML's `lang="en"`, the natural language of the text). Not when a
    python block defines something: the solution is there ("A common mistake:" in `text`)."""
    if any(language in _PYTHON_TAGS and _defines(code) for language, code in blocks):
        return blocks
    holding_python = {
        language
        for language, code in blocks
        if language and language not in _PYTHON_TAGS and _defines(code)
    }
    return [("" if language in holding_python else language, code) for language, code in blocks]


def _raw_code(output: str) -> str:
    """The code of a reply with no python or untagged fenced block: all of it when it
    parses, else the longest run of lines from the first code line that parses (prose may
    come before and after)."""
    output = _LANGUAGE_LINE.sub("", output, count=1)  # "python\ndef add(...)": a lost fence
    output = _tabs_repaired(_nbsp_indent_repaired(output))
    if _parses(output):
        return output
    matches = (_CODE_START.search(output), _INLINE_DEF.search(output))
    starts = [match.start() for match in matches if match is not None]
    if not starts:
        return output
    lines = output[min(starts) :].splitlines()
    end = _indented_block_end(lines)
    while end > 0:  # the longest run of lines from there that parses (prose may follow)
        # dedented: a markdown code block is indented as a whole ("    def add(...)")
        code = textwrap.dedent("\n".join(lines[:end]))
        error_line = _syntax_error_line(code)
        if error_line is None:
            return code if code.strip() else output
        # every run that holds the faulty line fails too: one parse per error, not per line
        end = min(end, error_line) - 1
    return output


def _block(language: str, info: str, code: str) -> tuple[str, str]:
    """A fenced block's language and code. A fence inside a list item is indented as a whole;
    the code itself is not. An untagged block may give its tag on its first line
    ("```\npython\ndef add(...)"): the name `python` would raise NameError before any test.
    Code may start on the fence line ("```python def add(a, b):", "```def add(a, b):"),
    where CommonMark reads an info string."""
    if _CODE_START.match(f"{language}{info}".strip()):
        language, code = "", f"{language}{info}".strip() + "\n" + code
    elif _CODE_START.match(info.strip()):
        code = info.strip() + "\n" + code
    if not language and _LANGUAGE_LINE.match(code):
        language, code = "python", _LANGUAGE_LINE.sub("", code, count=1)
    return language.lower(), _tabs_repaired(textwrap.dedent(_nbsp_indent_repaired(code)))


def _nbsp_indent_repaired(code: str) -> str:
    """`code` that does not parse with its no-break spaces (U+00A0, a syntax error) in the
    indentation read as spaces: a reply's text may carry them where it meant spaces."""
    if "\u00a0" not in code or _parses(code):
        return code
    return _INDENT.sub(lambda match: match.group().replace("\u00a0", " "), code)


def _tabs_repaired(code: str) -> str:
    """`code` whose indentation mixes tabs and spaces (a TabError: Python will not guess a
    tab's width) with its indenting tabs read as 4 or as 8 columns, when the widths that
    parse read the same; else `code` unchanged (an ambiguous mix stays the code's error)."""
    if "\t" not in code or not _tab_error(code):
        return code
    readings: dict[str, str] = {}
    for width in (4, 8):
        lines = [_indent_expanded(line, width) for line in code.split("\n")]
        repaired = "\n".join(lines)
        if _parses(repaired):
            readings.setdefault(ast.dump(ast.parse(repaired)), repaired)
    return next(iter(readings.values())) if len(readings) == 1 else code


def _indent_expanded(line: str, width: int) -> str:
    body = line.lstrip(" \t")
    return line[: len(line) - len(body)].expandtabs(width) + body


def _tab_error(code: str) -> bool:
    try:
        ast.parse(code)
    except TabError:
        return True
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return False


def _indented_block_end(lines: list[str]) -> int:
    """How many lines an indented first line's block holds (up to the first non-empty line
    indented less: the prose after it); all of them when the first line is not indented."""
    indent = len(lines[0]) - len(lines[0].lstrip()) if lines else 0
    if indent == 0:
        return len(lines)
    for index, line in enumerate(lines):
        if line.strip() and len(line) - len(line.lstrip()) < indent:
            return index
    return len(lines)


def _defines(code: str) -> bool:
    """Whether `code` parses and defines a function or class at its top level (an untagged
    block of output, "Fizz", parses too but defines nothing)."""
    if not _parses(code):
        return False
    tree = ast.parse(code)
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        for node in tree.body
    )


def _states_something(code: str) -> bool:
    """Whether `code` parses and holds a statement at its top level (a definition, an import,
    an assignment, ...), not only values shown as output ("Fizz", "3", "[1, 2]")."""
    if not _parses(code):
        return False
    return any(not isinstance(node, ast.Expr) for node in ast.parse(code).body)


def _imports_pytest(code: str) -> bool:
    """Whether `code` (which parses) imports pytest at its top level: the model's tests."""
    for node in ast.parse(code).body:
        if isinstance(node, ast.Import) and any(
            alias.name.split(".")[0] == "pytest" for alias in node.names
        ):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "pytest":
            return True
    return False


def _parses(code: str) -> bool:
    return _syntax_error_line(code) is None and bool(code.strip())


def _syntax_error_line(code: str) -> int | None:
    """None when `code` parses, else the line of the error (the end when unknown). Deep
    nesting ("((((...") makes the parser run out of stack or memory: a syntax error too."""
    try:
        ast.parse(code)
    except SyntaxError as error:
        return error.lineno or code.count("\n") + 1
    except (ValueError, MemoryError, RecursionError):
        return code.count("\n") + 1
    return None


async def grade_code(task: Task, output: str, limits: SandboxLimits | None = None) -> Grade:
    if not task.tests:
        return cannot_grade("the code grader needs the task's tests")
    code = extract_code(output)
    if code is None:
        return wrong("no code in the output")
    result = await run_python_tests(code, task.tests, limits)
    if result.status == "internal_error":
        return cannot_grade(f"the code sandbox failed: {result.detail}")
    if result.status == "tests_error":
        return cannot_grade(f"the task's tests cannot run in the sandbox: {result.detail}")
    if result.total == 0:
        return cannot_grade("the task's tests hold no test")
    if result.status == "ok":
        failure = next((t for t in result.tests if not t.passed), None)
        detail = result.detail
        if failure is not None:
            detail += f"; first failure: {failure.name}: {failure.error}"
        return Grade(score=result.passed / result.total, detail=detail[:1000])
    return wrong(f"{result.status}: {result.detail}"[:1000])
