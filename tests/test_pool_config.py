"""The pool config (pool.yaml): loading, the errors that say what to fix, the embedded pool."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from fugu_lite.config_errors import ConfigError
from fugu_lite.workers.config import (
    LocalServerConfig,
    PoolConfig,
    WorkerConfig,
    embedded_pool_config,
    load_pool_config,
    one_call_at_a_time,
    pool_notes,
    resolve_gguf,
)

SECRET = "sk-test-9f8e7d6c5b4a39281706"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pool.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_pool_yaml_loads_and_resolves_relative_gguf(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "models").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # ~/ is the home folder's, not the pool's
    path = write(
        tmp_path,
        """
        workers:
          - id: remote
            model: gpt-4o-mini
            base_url: https://api.example.com/v1
            api_key_env: EXAMPLE_KEY
            input_price_per_mtok: 0.15
            output_price_per_mtok: 0.6
            params: {temperature: 0}
          - id: mine
            model: tiny
            local: {gguf: models/tiny.gguf}
          - id: home
            model: tiny
            local: {gguf: ~/tiny.gguf}
        opt_out: [remote]
        """,
    )
    config = load_pool_config(path)
    assert config.worker_ids == ["remote", "mine", "home"]
    assert config.worker("mine").local.gguf == str(tmp_path / "models" / "tiny.gguf")
    home_gguf = Path(config.worker("home").local.gguf).expanduser()  # as resolve_gguf reads it
    assert home_gguf == tmp_path / "home" / "tiny.gguf"
    assert config.opt_out == ["remote"]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("- {id: a, model: m}", "needs a base_url"),
        ("- {id: a, model: m, base_url: 'http://x', local: {gguf: a.gguf}}", "remove base_url"),
        ("- {id: a, model: m, base_url: 'http://x', api_key: abc}",
         r"api_key_env to the variable's NAME; known keys here: id, model,"),
        ("- {id: a, model: m, base_url: 'http://x', max_concurency: 2}",
         r"did you mean 'max_concurrency'\? known keys here: id,"),
        ("- {id: a, model: m, base_url: 'http://x', zzz: 2}",
         r"unknown key 'workers\.0\.zzz': known keys here: id,"),
        ("- {id: a, model: m, base_url: 'http://x', params: {model: x}}", "may not set model"),
        ("- {id: a, model: m, base_url: 'http://x', params: {stream: true}}", "may not set stream"),
        # sent in each call's body (the worker then got no key: a 401), the key kept in the file
        (f"- {{id: a, model: m, base_url: 'http://x', params: {{api_key: {SECRET}}}}}",
         r"params may not hold api_key: keys never go in the file: export the key and set "
         r"api_key_env to the variable's NAME$"),
        # a typo there left the worker meant routed to
        ("- {id: a, model: m, base_url: 'http://x'}\nopt_out: [b]",
         r"opt_out names unknown workers \['b'\]; the workers are a"),
        ("- {id: a, model: m, base_url: 'http://x'}\n  - {id: a, model: n, base_url: 'http://y'}",
         "repeated: a"),
        ("- {id: a, model: m, base_url: 'http://x', max_concurrency: 0}", "max_concurrency"),
        # each call's cost was inf: null in its record, -inf its reward
        ("- {id: a, model: m, base_url: 'http://x', output_price_per_mtok: 1e999}",
         "output_price_per_mtok: Input should be a finite number"),
        # a hung worker held its slot for ever; every retry's wait too long to take
        ("- {id: a, model: m, base_url: 'http://x', timeout_s: .inf}",
         r"workers\.0\.timeout_s: Input should be a finite number \(got inf\)"),
        ("- {id: a, model: m, base_url: 'http://x', retry_backoff_s: 1e999}",
         r"workers\.0\.retry_backoff_s: Input should be a finite number \(got .1e999.\)"),
        ("- {id: a, model: m, local: {gguf: a.gguf, startup_timeout_s: .inf}}",
         r"workers\.0\.local\.startup_timeout_s: Input should be a finite number"),
        # read as a path under the pool file's folder: "GGUF file /cfg/https:/hf.co/... not found"
        ("- {id: a, model: m, local: {gguf: 'https://hf.co/a/b/resolve/main/q4.gguf'}}",
         r"workers\.0\.local\.gguf: gguf 'https://hf\.co/a/b/resolve/main/q4\.gguf' is a URL; "
         r"llama\.cpp's server reads a file on this machine: download it first"),
        # a call to it went to .../chat/completions/chat/completions, a 404 "fix model or base_url"
        ("- {id: a, model: m, base_url: 'http://x/v1/chat/completions/'}",
         "give the API root it is under, http://x/v1 "),
    ],
)  # fmt: skip
def test_bad_pool_configs_say_what_to_fix(tmp_path: Path, body: str, expected: str) -> None:
    path = write(tmp_path, f"workers:\n  {body}\n")
    with pytest.raises(ConfigError, match=expected) as caught:
        load_pool_config(path)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize(
    ("base_url", "expected"),
    [
        # the SDK adds chat/completions after the query: '?api-version=1/chat/completions'
        ("https://x.example.com/v1?api-version=1",
         r"has a query \('\?api-version=\*\*\*'\): each call adds /chat/completions after it"),
        ("https://x.example.com/v1/chat/completions?api-version=1",
         r"has a query \('\?api-version=\*\*\*'\)"),
        ("https://x.example.com/v1#top", r"has a fragment \('#top'\)"),
        # a call went to 'https:///chat/completions', a DNS failure naming no host
        ("https://", r"names no host, e\.g\. https://api\.openai\.com/v1"),
        # said "needs its scheme, e.g. http://https:/x.example.com/v1"
        ("https:/x.example.com/v1", r"needs its scheme, e\.g\. http://x\.example\.com/v1"),
    ],
)  # fmt: skip
def test_a_base_url_with_a_query_or_no_host_says_what_to_fix(
    tmp_path: Path, base_url: str, expected: str
) -> None:
    path = write(tmp_path, f"workers:\n  - {{id: a, model: m, base_url: '{base_url}'}}\n")
    with pytest.raises(ConfigError, match=expected):
        load_pool_config(path)


@pytest.mark.parametrize(
    ("base_url", "shown"),
    [(f"https://ai.example.com/v1beta/openai?key={SECRET}", "https://ai.example.com/v1beta/openai?key=***"),
     (f"ai.example.com/v1?key={SECRET}", "http://ai.example.com/v1?key=***"),
     (f"https://me:{SECRET}@ai.example.com/v1/chat/completions", "https://***@ai.example.com/v1 ")],
)  # fmt: skip
def test_a_refused_base_url_is_shown_without_the_key_it_may_hold(
    tmp_path: Path, base_url: str, shown: str
) -> None:
    """A base_url with its key in its query (`?key=...`, as some APIs take it) or its
    user:password was refused with the whole URL echoed, the key on the terminal and in CI
    logs, where a call's error shows its address without them."""
    path = write(tmp_path, f"workers:\n  - {{id: a, model: m, base_url: '{base_url}'}}\n")
    with pytest.raises(ConfigError, match=re.escape(shown)) as caught:
        load_pool_config(path)
    assert SECRET not in str(caught.value)


def test_a_base_url_with_its_scheme_in_capitals_loads(tmp_path: Path) -> None:
    """'HTTPS://...' was refused as one that "needs its scheme"; the SDK takes it."""
    path = write(
        tmp_path, "workers:\n  - {id: a, model: m, base_url: 'HTTPS://x.example.com/v1'}\n"
    )
    assert load_pool_config(path).worker("a").base_url == "HTTPS://x.example.com/v1"


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        # LiteLLM's names, per token: copying them made no match ("known keys here: ...")
        ("input_cost_per_token", "0.00000015", "write `input_price_per_mtok: 0.15`"),
        ("output_cost_per_token", "6e-7", "write `output_price_per_mtok: 0.6`"),
        ("prompt_price_per_1k_tokens", "0.0005", "write `input_price_per_mtok: 0.5`"),
        ("input_price_per_million", "2.5", "write `input_price_per_mtok: 2.5`"),
        ("completion_price", "0.6", "write `output_price_per_mtok` in them; "),
    ],
)  # fmt: skip
def test_a_price_under_another_name_says_the_key_and_value_per_million(
    tmp_path: Path, key: str, value: str, expected: str
) -> None:
    """A price under another name (`input_cost_per_token`, as LiteLLM's configs write it)
    was an unknown key, at best "did you mean 'input_price_per_mtok'?": renamed, its value
    per token was taken per million tokens, a million times too cheap. The error now names
    the key with the value per million tokens."""
    body = f"- {{id: a, model: m, base_url: 'http://x', {key}: {value}}}"
    with pytest.raises(ConfigError, match=re.escape(expected)):
        load_pool_config(write(tmp_path, f"workers:\n  {body}\n"))


@pytest.mark.parametrize(
    ("worker", "expected"),
    [
        ("id: 1, model: m", "workers.0.id: Input should be a valid string (got 1); YAML reads 1 "
         "as a number: write the text in quotes ('1')"),
        ("id: a, model: 2024-08-06", "YAML reads 2024-08-06 as a date: write the text in quotes "
         "('2024-08-06')"),
        ("id: a, model: m, system_prompt: no", "YAML reads an unquoted no, off or false as the "
         "boolean false: write the text in quotes (e.g. 'no')"),
    ],
)  # fmt: skip
def test_a_worker_text_that_yaml_reads_as_a_number_or_date_says_to_quote_it(
    tmp_path: Path, worker: str, expected: str
) -> None:
    """`id: 1`, `model: 2024-08-06` or `system_prompt: no` were refused as "Input should be a
    valid string (got datetime.date(2024, 8, 6))", with no word of YAML or of quotes, as the
    training configs' errors give it."""
    body = f"- {{{worker}, base_url: 'http://x'}}"
    with pytest.raises(ConfigError, match=re.escape(expected)):
        load_pool_config(write(tmp_path, f"workers:\n  {body}\n"))


@pytest.mark.parametrize(
    ("setting", "key"),
    [("max_concurrency: yes", "workers.0.max_concurrency"),
     ("input_price_per_mtok: true", "workers.0.input_price_per_mtok"),
     ("max_retries: off", "workers.0.max_retries"),
     ("timeout_s: no", "workers.0.timeout_s"),
     ("local: {gguf: a.gguf, n_threads: on}", "workers.0.local.n_threads")],
)  # fmt: skip
def test_a_worker_number_that_yaml_reads_as_a_boolean_is_refused_naming_the_key(
    tmp_path: Path, setting: str, key: str
) -> None:
    """pydantic takes a boolean as 1 or 0 for a number, so `input_price_per_mtok: true` priced
    the worker at 1 USD and `max_concurrency: yes` sent it one call at a time without a word
    (`timeout_s: no` was "greater than 0 (got False)"), where a training config refuses such
    a number as a boolean; the pool now says so too."""
    place = "" if setting.startswith("local") else ", base_url: 'http://x'"
    path = write(tmp_path, f"workers:\n  - {{id: a, model: m, {setting}{place}}}\n")
    with pytest.raises(ConfigError, match=rf"{re.escape(key)}: Input should be a number, not "):
        load_pool_config(path)


@pytest.mark.parametrize(
    ("worker_id", "expected"),
    [
        ("gpt 4o mini", "workers.1.id: worker id 'gpt 4o mini' has characters other than "
         "letters, digits and ._:/@+- (no spaces); e.g. 'gpt-4o-mini'"),
        ("-fast", "workers.1.id: worker id '-fast' does not start with a letter or digit; e.g. "
         "'fast'"),
        ("", "workers.1.id: a worker id may not be empty"),
    ],
)  # fmt: skip
def test_a_worker_id_that_is_refused_is_shown_with_one_that_would_do(
    tmp_path: Path, worker_id: str, expected: str
) -> None:
    """An id with a space was refused as "workers.1.id: a worker id is letters, digits and
    ._:/@+- (no spaces), starting with a letter or digit", without the id: in a pool of many
    workers the user counted them to find it, and what was wrong with it was not said."""
    body = f"- {{id: a, model: m, base_url: 'http://x'}}\n  - {{id: '{worker_id}', model: m}}"
    with pytest.raises(ConfigError, match=re.escape(expected)):
        load_pool_config(write(tmp_path, f"workers:\n  {body}\n"))


@pytest.mark.parametrize(("worker_id", "would_do"), [("._ fast", "fast"), ("@-x", "x")])
def test_the_id_suggested_for_a_refused_worker_id_is_one_that_would_do(
    worker_id: str, would_do: str
) -> None:
    """A refused id starting with punctuation beside a space ('._ fast') was shown with a
    suggestion that is refused itself ('-fast': it starts with '-')."""
    from fugu_lite.workers.config import worker_id_problem

    problem = worker_id_problem(worker_id)
    assert problem is not None and problem.endswith(f"; e.g. {would_do!r}")
    assert worker_id_problem(would_do) is None


@pytest.mark.parametrize(
    "pasted",
    [SECRET, "gsk_Xq3Jd9LmP02kZr7VbN4tYw8Hc1FgEe6UaS5o", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345",
     "Xk3jd9LmP02kZr7VbN4tYw8Hc1FgEe6U", "ab3f9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b"],
)  # fmt: skip
def test_a_key_pasted_into_api_key_env_is_rejected_without_echoing_it(
    tmp_path: Path, pasted: str
) -> None:
    """A key of a variable name's characters (Groq's gsk_..., Hugging Face's hf_..., Mistral's
    letters and digits, a hex key) was taken as the variable's name, and the pool's start
    printed it: "reads its API key from the environment variable gsk_..., which is not set;
    `export gsk_...=...` first". A variable's name is still taken."""
    worker = "{id: a, model: m, base_url: 'http://x', api_key_env: '%s'}"
    with pytest.raises(ConfigError, match="NAME of the environment variable") as caught:
        load_pool_config(write(tmp_path, f"workers:\n  - {worker % pasted}\n"))
    assert pasted not in str(caught.value)
    named = load_pool_config(write(tmp_path, f"workers:\n  - {worker % 'AZURE_OPENAI_KEY_2'}\n"))
    assert named.worker("a").api_key_env == "AZURE_OPENAI_KEY_2"


def test_missing_pool_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="embedded local pool"):
        load_pool_config(tmp_path / "absent.yaml")
    with pytest.raises(ConfigError, match=r"\.yaml, line 2, column 1: not valid YAML: ") as error:
        load_pool_config(write(tmp_path, "workers: [\n"))
    assert "<unicode string>" not in str(error.value)


def test_a_pool_key_given_twice_is_refused(tmp_path: Path) -> None:
    """A second `workers:` list (workers added at the end of the file) replaced the first
    one's workers with no word."""
    worker = "  - {{id: {}, model: m, base_url: 'http://x'}}\n"
    text = "workers:\n" + worker.format("a") + "workers:\n" + worker.format("b")
    with pytest.raises(ConfigError, match=r"'workers' is given twice .*line 1, again on line 3"):
        load_pool_config(write(tmp_path, text))


def test_a_pool_file_that_is_not_utf8_names_the_line(tmp_path: Path) -> None:
    """A pool.yaml saved as Latin-1 failed with a bare UnicodeDecodeError, no file named."""
    path = tmp_path / "pool.yaml"
    path.write_bytes(b"workers:\n  - {id: caf\xe9, model: m, base_url: 'http://x'}\n")
    with pytest.raises(ConfigError, match=r"pool\.yaml, line 2: not UTF-8 text"):
        load_pool_config(path)


def test_local_workers_are_sent_one_call_at_a_time_and_only_what_needs_a_word_is_noted() -> None:
    """What collect and serve say of a pool at their start, and the local workers' one call
    at a time, were read only by integration runs of llama.cpp (minutes) and by remote pools:
    a remote worker sent one call at a time, a local worker with max_concurrency 1 noted as
    queued, a local worker noted as unpriced (it costs nothing to run), a price whose call of
    a million tokens costs more than a float holds not noted, or a pool priced nowhere told
    of unpriced workers (an IndexError naming none priced) passed every unit test."""
    local = {"model": "m", "local": {"gguf": "a.gguf"}}
    config = PoolConfig.model_validate(
        {
            "workers": [
                {"id": "remote", "model": "m", "base_url": "http://x", "max_concurrency": 4,
                 "input_price_per_mtok": 1e303, "output_price_per_mtok": 0.6},
                {**local, "id": "busy", "max_concurrency": 3},
                {**local, "id": "calm"},
            ]
        }
    )  # fmt: skip
    sent = one_call_at_a_time(config)
    assert [worker.max_concurrency for worker in sent.workers] == [4, 1, 1]
    notes = pool_notes(config)
    assert len(notes) == 2, notes
    assert notes[0].startswith("local worker busy is sent one call at a time, not max_concurrency")
    assert notes[1].startswith("worker remote's input_price_per_mtok is 1e+303 USD per million")
    unpriced = {"id": "remote", "model": "m", "base_url": "http://x"}  # none priced: no note
    assert (
        pool_notes(PoolConfig.model_validate({"workers": [unpriced, {**local, "id": "calm"}]}))
        == []
    )


def test_embedded_pool_is_local_variants_of_the_shipped_gguf() -> None:
    config = embedded_pool_config()
    assert len(config.workers) >= 2
    assert all(worker.local is not None for worker in config.workers)
    assert resolve_gguf("embedded:smollm2").stat().st_size > 10_000_000
    settings = {
        (worker.system_prompt, tuple(sorted(worker.params.items()))) for worker in config.workers
    }
    assert len(settings) == len(config.workers)  # every variant differs
    prices = {(w.input_price_per_mtok, w.output_price_per_mtok) for w in config.workers}
    assert len(prices) == len(config.workers)
    assert load_pool_config(None) == config


def test_unknown_embedded_model_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="embedded:smollm2"):
        resolve_gguf("embedded:llama-70b")


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 9\n", "git lfs pull"),
        # a text file opening as a pointer does, with no pointer's spec: not one
        (b"version 3 of the model: see its page\n", "it starts with b'version ', not b'GGUF'"),
        (b"\n<!DOCTYPE html><html><body>model page</body></html>", "web page"),
        # saved as "UTF-8 with BOM": the BOM before the page
        (b"\xef\xbb\xbf<!DOCTYPE html><html><body>model page</body></html>", "web page"),
        (b"PK\x03\x04 a zip archive", "starts with b'PK\\x03\\x04"),
    ],
)
def test_a_file_that_is_not_a_gguf_is_refused_before_a_server_starts(
    tmp_path: Path, content: bytes, said: str
) -> None:
    """It used to start llama.cpp's server, which exited with the reason deep in its log."""
    path = tmp_path / "model.gguf"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match="is not a GGUF model") as caught:
        resolve_gguf(str(path))
    assert said in str(caught.value) and str(path) in str(caught.value)
    path.write_bytes(b"GGUF" + bytes(60))
    assert resolve_gguf(str(path)) == path


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--n_ctx", "4096"], "--n_ctx: fugu-lite sets it (use local.n_ctx)"),
        (["--seed", "1", "--port=8000"], "--port: fugu-lite sets it"),
    ],
)
def test_extra_args_that_override_the_flags_fugu_lite_sets_are_refused(
    args: list[str], said: str
) -> None:
    """llama.cpp's server takes the last of a flag given twice: --n_ctx here ran it with a
    context that fugu-lite did not count with, --port left it polling a port nobody used."""
    worker = {"id": "w", "model": "m", "local": {"gguf": "embedded:smollm2", "extra_args": args}}
    with pytest.raises(ValidationError, match=re.escape(said)):
        PoolConfig.model_validate({"workers": [worker]})
    worker["local"]["extra_args"] = ["--seed", "1", "--n_gpu_layers", "0"]
    assert PoolConfig.model_validate({"workers": [worker]}).workers[0].local.extra_args[1] == "1"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--config_file", "llama.yaml"], "--config_file: llama.cpp's server then takes every"),
        (["--api_key=secret"], "--api_key: fugu-lite checks and calls its own server without a"),
        (["--ssl_keyfile", "k.pem"], "--ssl_keyfile: the server would answer HTTPS only"),
        (["--ssl_certfile=c.pem"], "--ssl_certfile: the server would answer HTTPS only"),
        (
            ["--hf_model_repo_id", "bartowski/Qwen2.5-0.5B-Instruct-GGUF"],
            "--hf_model_repo_id: llama.cpp's server would then download a model from that",
        ),
        (["--help"], "--help: llama.cpp's server would print its flags and exit at its start"),
        (["--seed", "1", "-h"], "-h: llama.cpp's server would print its flags and exit"),
        (["--he"], "--he: llama.cpp's server reads it as --help (a flag's start stands for"),
    ],
)
def test_extra_args_that_undo_what_fugu_lite_relies_on_are_refused(
    args: list[str], said: str
) -> None:
    """--config_file made llama.cpp's server take every setting from the file, none of the
    flags fugu-lite sets (it listened on the file's port, 8000 by default, while fugu-lite
    polled another); --api_key made it refuse fugu-lite's own checks (401); --ssl_keyfile
    and --ssl_certfile made it answer HTTPS only, and fugu-lite polls over HTTP: each start
    timed out after startup_timeout_s ("raise it if the machine is busy"). -h or --help
    (or its start) made it print its flags and exit: it was refused as a flag llama.cpp's
    server does not have ("did you mean '--model'?"), then told to see its flags with
    --help. --hf_model_repo_id made it look for local.gguf's path in that Hugging Face repo,
    to download, serving no local.gguf: its start failed on a file not found there, or on
    HF_HUB_OFFLINE, saying to unset it."""
    worker = {"id": "w", "model": "m", "local": {"gguf": "embedded:smollm2", "extra_args": args}}
    with pytest.raises(ValidationError, match=re.escape(said)):
        PoolConfig.model_validate({"workers": [worker]})


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--root_path", "/v1"], "--root_path /v1: llama.cpp's server would take /v1 off the "
         "paths fugu-lite calls (/v1/models, /v1/chat/completions) and answer them 404"),
        (["--root=/v1/chat"], "--root_path /v1/chat: llama.cpp's server would take /v1/chat "
         "off the paths fugu-lite calls (/v1/chat/completions)"),
        (["--root_path", "/proxy", "--root_path=/v1/models"], "--root_path /v1/models:"),
    ],
)  # fmt: skip
def test_a_root_path_that_takes_the_paths_fugu_lite_calls_is_refused(
    args: list[str], said: str
) -> None:
    """--root_path /v1 made llama.cpp's server take /v1 off /v1/models and
    /v1/chat/completions and answer them 404 (checked on a real server; /v1/chat left
    /v1/models answering and every call 404): its start timed out, or every call failed."""
    worker = {"id": "w", "model": "m", "local": {"gguf": "embedded:smollm2", "extra_args": args}}
    with pytest.raises(ValidationError, match=re.escape(said)):
        PoolConfig.model_validate({"workers": [worker]})


@pytest.mark.parametrize(
    "args",
    [
        ["--root_path", "/proxy"],
        ["--root=/llm"],
        ["--root_path=/v1x"],
        ["--root_path", "/v1", "--root_path", "/proxy"],  # argparse takes the last
        ["--root_path="],
    ],
)
def test_a_reverse_proxys_root_path_is_taken(args: list[str]) -> None:
    """A root path that the paths fugu-lite calls do not go on from (a reverse proxy's) is
    harmless: a real llama.cpp server with --root_path /proxy answered /v1/models and
    /v1/chat/completions as without it. It was refused all the same."""
    worker = {"id": "w", "model": "m", "local": {"gguf": "embedded:smollm2", "extra_args": args}}
    local = PoolConfig.model_validate({"workers": [worker]}).workers[0].local
    assert local is not None and local.extra_args == args


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["--interrupt", "True"],
            "--interrupt: llama.cpp's server reads it as --interrupt_requests",
        ),
        (
            ["--n_thr=64"],
            "--n_thr: llama.cpp's server reads it as --n_threads or --n_threads_batch",
        ),
        (["--seed", "1", "--po", "8000"], "--po: llama.cpp's server reads it as --port"),
        (["--model_a=other"], "--model_a: llama.cpp's server reads it as --model_alias"),
        (["--config=x.yaml"], "--config: llama.cpp's server reads it as --config_file (a"),
    ],
)
def test_extra_args_abbreviating_the_flags_fugu_lite_sets_are_refused(
    args: list[str], said: str
) -> None:
    """llama.cpp's server (argparse) takes a flag's start for the whole flag: `--interrupt
    True` cut off a stream for each new request and `--po 8000` left fugu-lite polling a
    port nobody used, though their whole names were refused."""
    worker = {"id": "w", "model": "m", "local": {"gguf": "embedded:smollm2", "extra_args": args}}
    with pytest.raises(ValidationError, match=re.escape(said)):
        PoolConfig.model_validate({"workers": [worker]})
    worker["local"]["extra_args"] = ["--n_gpu_layers", "0", "--n_ubatch=8", "--verbose", "True"]
    assert PoolConfig.model_validate({"workers": [worker]}).workers[0].local is not None


@pytest.mark.parametrize(
    ("body", "keys"),
    [
        ("model: {backbone: x}\nsft: {training: {}}\nes: {}\n", ["model", "sft", "es"]),
        ("model: {backbone: x}\ntraining: {epochs: 2}\n", ["model", "training"]),
    ],
)
def test_a_training_config_given_as_a_pool_config_says_what_it_is(
    tmp_path: Path, body: str, keys: list[str]
) -> None:
    """`collect --pool configs/default.yaml` said "workers: Field required" and "unknown key
    'sft'" with the pool's keys, as if mistyped, not the wrong file."""
    with pytest.raises(ConfigError) as caught:
        load_pool_config(write(tmp_path, body + "wrokers: []\n"))
    lines = str(caught.value).splitlines()
    hint = "a training config's key: is this a training config (for -c of train, demo)? "
    for key in keys:
        assert f"  unknown key {key!r}: {hint}known keys here: workers, opt_out" in lines
    assert "  unknown key 'wrokers': did you mean 'workers'? known keys here: workers, opt_out" in (
        lines
    )


def test_an_empty_pool_file_or_a_bare_list_of_workers_says_what_to_write(tmp_path: Path) -> None:
    """An empty pool file said "must be a mapping with a `workers:` list, got NoneType", and
    the worker list without its `workers:` key "got list"."""
    with pytest.raises(ConfigError) as caught:
        load_pool_config(write(tmp_path, "# workers to come\n"))
    assert "pool.yaml is empty (or only comments): write a `workers:` list" in str(caught.value)
    assert "NoneType" not in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        load_pool_config(write(tmp_path, "- {id: a, model: m, base_url: 'http://x'}\n"))
    assert "the top level is a list; a pool config is a mapping: put the list under " in str(
        caught.value
    )
    fixed = write(tmp_path, "workers:\n  - {id: a, model: m, base_url: 'http://x'}\n")
    assert load_pool_config(fixed).worker_ids == ["a"]


def test_workers_written_as_a_mapping_by_id_say_to_write_a_list_without_echoing_them(
    tmp_path: Path,
) -> None:
    """`workers:` as a mapping of ids to settings was "Input should be a valid list (got
    {...})", the whole pool echoed, a key pasted into api_key_env with it, and no word of
    the list to write."""
    path = write(
        tmp_path,
        f"""
        workers:
          fast: {{model: m, base_url: 'http://x', api_key_env: '{SECRET}'}}
          slow: {{model: n, base_url: 'http://y'}}
        """,
    )
    with pytest.raises(ConfigError) as caught:
        load_pool_config(path)
    assert "workers: is a mapping ('fast', 'slow'), not a list: write each worker as an item " in (
        str(caught.value)
    )
    assert SECRET not in str(caught.value)


def test_a_top_level_anchor_of_shared_worker_settings_says_where_it_goes(tmp_path: Path) -> None:
    """`defaults: &d {...}` merged into each worker was refused as "unknown key 'defaults'"
    with the pool's keys, no word of where shared worker settings go."""
    shared = "defaults: &d {model: m, base_url: 'http://x/v1'}\nworkers:\n  - {<<: *d, id: a}\n"
    with pytest.raises(ConfigError) as caught:
        load_pool_config(write(tmp_path, shared))
    assert (
        "  unknown key 'defaults': if it only holds a YAML anchor (`defaults: &defaults ...`), "
        "put the anchor on the first worker (`- &defaults {id: a, ...}`) and merge it into the "
        "others with `- {<<: *defaults, id: b}`; known keys here: workers, opt_out"
    ) in str(caught.value).splitlines()
    # what the hint says works
    fixed = "workers:\n  - &d {id: a, model: m, base_url: 'http://x/v1', max_concurrency: 3}\n"
    config = load_pool_config(write(tmp_path, fixed + "  - {<<: *d, id: b}\n"))
    assert [(w.id, w.model, w.max_concurrency) for w in config.workers] == [
        ("a", "m", 3),
        ("b", "m", 3),
    ]
    # a mistyped section keeps its own hint
    with pytest.raises(ConfigError) as caught:
        load_pool_config(write(tmp_path, "workers:\n  - {id: a, model: m}\nopt_outs: {}\n"))
    assert "did you mean 'opt_out'?" in str(caught.value)
    assert "YAML anchor" not in str(caught.value)


@pytest.mark.parametrize(
    ("worker", "expected"),
    [
        # the local server's settings written on the worker itself
        ("gguf: embedded:smollm2", "unknown key 'workers.0.gguf': it is a local: key; write "
         "`local: {gguf: embedded:smollm2}`, or put it indented under the worker's `local:`; "),
        ("local: {gguf: embedded:smollm2}, n_ctx: 4096", "unknown key 'workers.0.n_ctx': it is a "
         "local: key; write `local: {n_ctx: 4096}`, or put it indented under the worker's "),
        # llama.cpp server flags fugu-lite has no key for, and one it sets itself
        ("local: {gguf: embedded:smollm2, n_gpu_layers: 99}", "unknown key "
         "'workers.0.local.n_gpu_layers': if it is a llama.cpp server flag, pass it in "
         "extra_args: `extra_args: ['--n_gpu_layers', '99']`; known keys here: gguf,"),
        ("local: {gguf: embedded:smollm2, port: 8080}", "unknown key 'workers.0.local.port': "
         "fugu-lite sets llama.cpp's --port itself (a free port it polls); known keys here:"),
        # a flag that extra_args refuses is not suggested there
        ("local: {gguf: embedded:smollm2, config_file: llama.yaml}", "unknown key "
         "'workers.0.local.config_file': llama.cpp's --config_file is not for a local worker: "
         "llama.cpp's server then takes every setting from that file"),
        # a mistyped key keeps its own hint
        ("local: {gguf: embedded:smollm2, n_thread: 2}", "unknown key 'workers.0.local.n_thread': "
         "did you mean 'n_threads'? known keys here:"),
    ],
)  # fmt: skip
def test_a_local_workers_misplaced_keys_say_where_they_go(
    tmp_path: Path, worker: str, expected: str
) -> None:
    """`gguf:` on the worker itself, or llama.cpp's `n_gpu_layers:` under local:, were
    refused as unknown keys with no word of where they go."""
    path = write(tmp_path, f"workers:\n  - {{id: a, model: m, {worker}}}\n")
    with pytest.raises(ConfigError) as caught:
        load_pool_config(path)
    assert expected in str(caught.value)


@pytest.mark.parametrize(
    ("worker", "expected"),
    [
        ("local: embedded:smollm2", "  workers.0.local: Input should be a valid dictionary or "
         "instance of LocalServerConfig (got 'embedded:smollm2'); local: is a section: write "
         "`local: {gguf: embedded:smollm2}`"),
        ("local: {gguf: embedded:smollm2, extra_args: '--seed 1'}", "  workers.0.local.extra_args: "
         "Input should be a valid list (got '--seed 1'); extra_args is a list of words: write "
         "`extra_args: ['--seed', '1']`"),
    ],
)  # fmt: skip
def test_a_local_section_or_extra_args_written_as_one_string_says_how_to_write_it(
    tmp_path: Path, worker: str, expected: str
) -> None:
    """`local: embedded:smollm2` and `extra_args: '--seed 1'` said only that a dictionary
    or a list was expected; the error now writes what was meant, which loads."""
    path = write(tmp_path, f"workers:\n  - {{id: a, model: m, {worker}}}\n")
    with pytest.raises(ConfigError) as caught:
        load_pool_config(path)
    assert expected in str(caught.value).splitlines()
    fixed = expected.split("`")[1]
    if not fixed.startswith("local:"):
        fixed = f"local: {{gguf: embedded:smollm2, {fixed}}}"
    assert load_pool_config(write(tmp_path, f"workers:\n  - {{id: a, model: m, {fixed}}}\n"))


def test_a_number_in_extra_args_says_to_quote_it(tmp_path: Path) -> None:
    """`extra_args: [--seed, 1]` (YAML reads 1 as a number) said only 'Input should be a
    valid string (got 1)'; the error now says to quote it, and the quoted list loads."""
    worker = "{id: a, model: m, local: {gguf: embedded:smollm2, extra_args: [--seed, %s]}}"
    with pytest.raises(ConfigError) as caught:
        load_pool_config(write(tmp_path, f"workers:\n  - {worker % '1'}\n"))
    assert (
        "  workers.0.local.extra_args.1: Input should be a valid string (got 1); each item is "
        "one word of llama.cpp's command line: quote it, '1'"
    ) in str(caught.value).splitlines()
    config = load_pool_config(write(tmp_path, f"workers:\n  - {worker % repr('1')}\n"))
    assert config.workers[0].local is not None
    assert config.workers[0].local.extra_args == ["--seed", "1"]


def test_a_local_n_ctx_past_llama_cpps_32_bits_is_refused(tmp_path: Path) -> None:
    """llama.cpp keeps n_ctx in 32 bits: local.n_ctx 4294967552 (2**32 + 256) gave a server
    of 256 tokens while fugu-lite took its refusals as of a context of billions."""
    path = tmp_path / "pool.yaml"
    path.write_text("workers: [{id: a, model: m, local: {gguf: x.gguf, n_ctx: 4294967552}}]\n")
    with pytest.raises(ConfigError, match=r"workers\.0\.local\.n_ctx: Input should be less than "):
        load_pool_config(path)
    path.write_text("workers: [{id: a, model: m, local: {gguf: x.gguf, n_ctx: 4294967295}}]\n")
    assert load_pool_config(path).workers[0].local.n_ctx == 2**32 - 1


def test_an_extra_args_item_of_a_flag_and_its_value_says_to_split_it() -> None:
    """`extra_args: ['--seed 1']` passed the config and serve's check, and llama.cpp's server
    exited at the pool's start, its log ending in 'unrecognized arguments: --seed 1'."""
    worker = {"id": "w", "model": "m", "local": {"gguf": "embedded:smollm2"}}
    worker["local"]["extra_args"] = ["--n_gpu_layers", "0", "--seed 1"]
    said = "extra_args item '--seed 1' is several words of llama.cpp's command line in one; "
    with pytest.raises(
        ValidationError, match=re.escape(said + "give each its own item: ['--seed', '1']")
    ):
        PoolConfig.model_validate({"workers": [worker]})
    worker["local"]["extra_args"] = ["--lora_path", "/models/my lora.gguf", "--seed=1"]
    assert PoolConfig.model_validate({"workers": [worker]}).workers[0].local is not None


@pytest.mark.parametrize(
    ("extra_args", "said"),
    [
        (f"['--api_key {SECRET}']", "extra_args may not set --api_key: fugu-lite checks and "),
        (f"['--api {SECRET}']", "extra_args may not set --api: llama.cpp's server reads it as "),
        (f"['--seed 1 --api_key={SECRET}']", "extra_args item '--seed 1 --api_key=***' is "
         "several words of llama.cpp's command line in one; give each its own item: "
         "['--seed', '1', '--api_key=***']"),
        (f"'--api_key {SECRET}'", "(got '--api_key ***'); extra_args is a list of words: write "
         "`extra_args: ['--api_key', '***']`"),
    ],
)  # fmt: skip
def test_an_api_key_given_in_extra_args_is_refused_without_echoing_it(
    tmp_path: Path, extra_args: str, said: str
) -> None:
    """`extra_args: ['--api_key sk-...']` (a flag and its key in one item) was told to be
    split into ['--api_key', 'sk-...'], the key printed on the terminal and in CI logs before
    --api_key itself was refused; the flag is refused first now, and wherever an item's words
    are shown, the value given to --api_key (or a start of it) is ***."""
    worker = f"{{id: a, model: m, local: {{gguf: embedded:smollm2, extra_args: {extra_args}}}}}"
    with pytest.raises(ConfigError) as caught:
        load_pool_config(write(tmp_path, f"workers:\n  - {worker}\n"))
    assert said in str(caught.value)
    assert SECRET not in str(caught.value)


_KEYED_LOCAL = {"gguf": "embedded:smollm2", "extra_args": ["--api_key", SECRET]}
_KEYED_PARAMS = {"extra_headers": {"Authorization": f"Bearer {SECRET}"}}
_KEYED_WORKER = {"id": "a", "model": "m", "base_url": "http://h", "params": _KEYED_PARAMS}


@pytest.mark.parametrize(
    ("model", "given"),
    [
        (LocalServerConfig, _KEYED_LOCAL),
        (LocalServerConfig, {**_KEYED_LOCAL, "extra_args": [f"--api={SECRET}"]}),
        (WorkerConfig, {"id": "a", "model": "m", "local": _KEYED_LOCAL}),
        (WorkerConfig, {"id": "a", "model": "m", "base_url": f"ai.example.com?key={SECRET}"}),
        (WorkerConfig, {"id": "a", "model": "m", "base_url": "http://h", "api_key_env": SECRET}),
        (WorkerConfig, {"id": "a", "model": "m", "base_url": "h", "params": {"api_key": SECRET}}),
        (PoolConfig, {"workers": [{"id": "a", "model": "m", "local": _KEYED_LOCAL}]}),
        # a model check refusing the whole worker or pool showed its input cut to its ends,
        # the key's last 18 characters in a header its params send
        (WorkerConfig, {"id": "a", "model": "m", "params": _KEYED_PARAMS}),
        (PoolConfig, {"workers": [_KEYED_WORKER, _KEYED_WORKER]}),
    ],
)  # fmt: skip
def test_a_pool_model_validated_directly_never_shows_a_key(
    model: type[LocalServerConfig | WorkerConfig | PoolConfig], given: dict
) -> None:
    """Through load_pool_config the key was masked, but PoolConfig.model_validate (Python's
    way in, no YAML file) raised pydantic's ValidationError, whose text shows each refused
    input: an extra_args --api_key's value, a base_url's ?key=, a key pasted as api_key_env,
    or the whole pool with them when a model check refused it (cut to its ends, whose last
    characters were the key's)."""
    with pytest.raises(ValidationError) as caught:
        model.model_validate(given)
    assert SECRET[-12:] not in str(caught.value)
    assert SECRET[-12:] not in repr(caught.value)
    assert caught.value.errors()  # what describe_pool_error reads keeps its inputs


@pytest.mark.parametrize("name", ["1OPENAI_KEY", "OPENAI-KEY", "OPENAI KEY", "OPENAI.KEY"])
def test_an_api_key_env_no_shell_can_set_is_refused_naming_the_rule(
    tmp_path: Path, name: str
) -> None:
    """A name that starts with a digit or holds a '-' or '.', which no POSIX shell can
    export, was refused as a key pasted in the name's place ("not the key itself") to a user
    who wrote a name; the refusal names the rule of a variable's name, still without the
    value (it may be a key)."""
    worker = f"{{id: a, model: m, base_url: 'http://x', api_key_env: '{name}'}}"
    with pytest.raises(ConfigError) as caught:
        load_pool_config(write(tmp_path, f"workers:\n  - {worker}\n"))
    said = str(caught.value)
    assert "a variable's name is letters, digits and _, and does not start with a digit" in said
    assert name not in said


@pytest.mark.parametrize(
    "base_url",
    [f"https://me:{SECRET}@ai.example.com/v1", f"http://{SECRET}@127.0.0.1:8080/v1",
     f"https://:{SECRET}@ai.example.com/v1"],
)  # fmt: skip
def test_a_base_url_holding_a_user_or_password_is_refused_without_showing_them(
    tmp_path: Path, base_url: str
) -> None:
    """A base_url with user:password@ was taken, and each call carried them as 'Basic ...'
    in place of the worker's Bearer key (checked on the stub worker, which recorded the
    Authorization header), while httpx logged the address with them at each call; it is
    refused, saying where a key goes, without showing them."""
    worker = f"{{id: a, model: m, base_url: '{base_url}', api_key_env: OPENAI_API_KEY}}"
    with pytest.raises(ConfigError) as caught:
        load_pool_config(write(tmp_path, f"workers:\n  - {worker}\n"))
    said = str(caught.value)
    assert "@" in said and "holds a user and password (user:password@): the openai SDK" in said
    assert "the key in the environment variable api_key_env names" in said
    assert SECRET not in said


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("yes: 1\nworkers:\n  - {id: a, model: m, base_url: 'http://x'}\n",
         "  the key True is not text; YAML reads an unquoted yes, on or true as the boolean "
         "true: write the text in quotes (e.g. 'yes'); known keys here: workers"),
        ("workers:\n  - {id: a, model: m, base_url: 'http://x', 1: 2}\n",
         "  workers.0: the key 1 is not text; YAML reads 1 as a number: write the text in "
         "quotes ('1'); known keys here: id, "),
        ("workers:\n  - id: a\n    model: m\n    local: {gguf: a.gguf, ~: 3}\n",
         "  workers.0.local: the key None is not text; YAML reads ~ or null as no value, and "
         "nothing before ':' is no key: write the key; known keys here: gguf, "),
    ],
)  # fmt: skip
def test_a_pool_key_yaml_reads_as_no_text_is_named_as_written(
    tmp_path: Path, text: str, line: str
) -> None:
    """`yes:` in a pool file was "1: Keys should be strings (got True)" (pydantic writes True
    as 1 in a key's path), where a training config names the key as written and how to quote
    it; a pool file now says the same."""
    with pytest.raises(ConfigError) as error:
        load_pool_config(write(tmp_path, text))
    assert line in str(error.value)
    assert "Keys should be strings" not in str(error.value)
