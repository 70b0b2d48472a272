"""The hashes that say whether a saved answer or grade still fits this run: request_hash
(what a worker is asked), local_hash and gguf_sha256 (a local worker's model file),
grading_hash (a task's answer key), grading_code_digest (the code that grades) and
judge_hash (what shapes a judge's verdict).
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any

from .. import sources_digest
from ..config_errors import ConfigError
from ..file_digests import file_sha256
from ..tasks import Task
from ..workers.config import WorkerConfig, resolve_gguf

JUDGE_PARAMS: dict[str, Any] = {"temperature": 0.0}  # every judge call: one verdict per answer
# The sources that compute a grade other than a judge's (tasks.py reads answer keys), relative
# to the package: a saved grade is computed again from its saved answer when they change.
GRADING_SOURCES = ("scoring/*.py", "sandbox*.py", "sandbox/*.py", "tasks.py")


def request_hash(worker: WorkerConfig, task: Task) -> str:
    """What the worker is asked, including its system prompt and decoding params: an
    answer is reused on resume only if the request would be the same."""
    payload = {
        "model": worker.model,
        "system_prompt": worker.system_prompt,
        "params": worker.params,
        "messages": task.chat_messages(),
    }
    return _json_sha1(payload)


def local_hash(worker: WorkerConfig) -> str | None:
    """A local worker's model: its GGUF file and chat format, which its request does not
    name (its `model` is only a label). None for a remote worker."""
    if worker.local is None:
        return None
    return _json_sha1(worker.local.model_dump(include={"gguf", "chat_format"}))


def gguf_sha256(worker: WorkerConfig) -> str | None:
    """The SHA-256 of a local worker's GGUF file (read once per version of the file, see
    file_digests.file_sha256): its path names no content, and a file replaced in place (another
    quant or model downloaded under the same name) gives other answers. None for a remote worker
    and for a file not found, whose worker answers nothing (it cannot start)."""
    if worker.local is None:
        return None
    try:
        return file_sha256(resolve_gguf(worker.local.gguf))
    except (ConfigError, OSError):
        return None


def grading_hash(task: Task) -> str:
    """What a grade depends on besides the answer: after a fix to a task's answer, tests or
    grader, its saved answers are graded again on resume (no new calls)."""
    payload = task.model_dump(include={"grader", "answer", "tests", "rubric", "case_sensitive"})
    return _json_sha1(payload)


@cache
def grading_code_digest() -> str:
    """The SHA-256 of the code that grades (GRADING_SOURCES): a grader fixed by an upgrade or
    in a checkout grades saved answers again on resume. A judge's verdicts are not asked
    again for it (they cost calls): judge_hash decides those."""
    return sources_digest(Path(__file__).parents[1], GRADING_SOURCES)


def judge_hash(judge: WorkerConfig) -> str:
    """What shapes a judge's verdict besides the task and the judged answer: its model, where
    it runs, its system prompt and the params of a judge call. A grade given by another
    judge, or by this one with other settings, is judged again on resume (no new answer)."""
    payload = {
        "model": judge.model,
        "base_url": judge.base_url,
        "local": local_hash(judge),
        "system_prompt": judge.system_prompt,
        "params": {**judge.params, **JUDGE_PARAMS},
    }
    return _json_sha1(payload)


def _json_sha1(payload: dict) -> str:
    return hashlib.sha1(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()
