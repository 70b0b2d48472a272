"""`fugu-lite route`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import Run, flat, invoke, ok, runner
from conftest import WORKERS, generated_records

from fugu_lite.cli import app
from fugu_lite.config import ModelConfig
from fugu_lite.schemas import write_records


def chosen(output: str) -> str:
    match = re.search(r"chosen worker: (\S+)", output)
    assert match, output
    return match.group(1)


def probability_rows(output: str) -> dict[str, float | str]:
    """worker -> probability, or the word "excluded" for an opted-out worker."""
    return {
        worker: value if value == "excluded" else float(value)
        for worker, value in re.findall(r"│\s*([\w-]+)\s*│\s*([0-9.]+|excluded)\s*│", output)
    }


def test_route_picks_the_best_worker_and_honours_opt_outs(run: Run) -> None:
    math_prompt = next(r for r in run.split("test") if r.task == "math")
    best = math_prompt.worker_ids[max(range(3), key=lambda i: math_prompt.rewards[i])]
    output = ok(invoke("route", "--checkpoint", run.checkpoint, math_prompt.prompt))
    assert chosen(output) == best == "mathematician"
    probabilities = probability_rows(output)
    assert set(probabilities) == set(WORKERS)
    assert max(probabilities, key=probabilities.get) == best
    # most likely first (no test read the rows' order)
    assert list(probabilities.values()) == sorted(probabilities.values(), reverse=True)
    assert sum(probabilities.values()) == pytest.approx(1.0, abs=2e-4)

    output = ok(
        invoke("route", "--checkpoint", run.checkpoint, "--exclude", best, math_prompt.prompt)
    )
    assert chosen(output) != best
    rows = probability_rows(output)
    assert rows[best] == "excluded"
    assert sum(p for w, p in rows.items() if w != best) == pytest.approx(1.0, abs=2e-4)

    both = ["--exclude", best, "--exclude", chosen(output)]
    output = ok(invoke("route", "--checkpoint", run.checkpoint, *both, math_prompt.prompt))
    (left,) = set(WORKERS) - {best, both[3]}
    assert chosen(output) == left
    assert probability_rows(output)[left] == pytest.approx(1.0)


def test_route_reads_the_prompt_from_stdin(run: Run) -> None:
    code_prompt = next(r for r in run.split("test") if r.task == "code")
    from_argument = chosen(ok(invoke("route", "--checkpoint", run.checkpoint, code_prompt.prompt)))
    from_stdin = chosen(
        ok(invoke("route", "--checkpoint", run.checkpoint, "-", input=code_prompt.prompt))
    )
    assert from_stdin == from_argument == "coder"


def test_route_help_says_how_to_give_a_prompt_that_starts_with_a_dash(run: Run) -> None:
    """`route --checkpoint DIR '-5 + 3?'` failed with click's "No such option: -5", and
    nothing said that such a prompt goes after `--`."""
    shown = flat(ok(runner.invoke(app, ["route", "--help"])).replace("│", " "))
    assert "starts with '-' goes after '--'" in shown, shown
    output = ok(invoke("route", "--checkpoint", run.checkpoint, "--", "-5 + 3?"))
    assert chosen(output) in WORKERS


def test_route_reads_an_echoed_prompt_as_the_same_prompt(run: Run) -> None:
    """`echo PROMPT | fugu-lite route -` routed the prompt with echo's line break: other
    features, other probabilities than `route PROMPT`."""
    prompt = run.split("test")[0].prompt
    assert isinstance(prompt, str)
    args = ("route", "--checkpoint", run.checkpoint, "--json")
    from_argument = json.loads(ok(invoke(*args, prompt)))
    for piped in (f"{prompt}\n", f"{prompt}\r\n"):
        assert json.loads(ok(invoke(*args, "-", input=piped))) == from_argument
    kept = json.loads(ok(invoke(*args, "-", input=f"{prompt}\n\n")))  # a line of its own
    assert kept["probabilities"] != from_argument["probabilities"]


def test_route_reads_a_piped_prompt_with_a_byte_order_mark_as_the_same_prompt(run: Run) -> None:
    """A prompt file saved as "UTF-8 with BOM" (Notepad, PowerShell 5's `Out-File -Encoding
    utf8`) piped to `route -` was routed with the BOM as its first character: other
    features, other probabilities than `route PROMPT`."""
    prompt = "What is 17 * 23?"  # short: a long one's start is cut at model.max_tokens
    args = ("route", "--checkpoint", run.checkpoint, "--json")
    from_argument = json.loads(ok(invoke(*args, prompt)))
    piped = runner.invoke(app, [str(arg) for arg in (*args, "-")],
                          input=f"\ufeff{prompt}\r\n".encode())  # fmt: skip
    assert json.loads(ok(piped)) == from_argument


def test_route_reading_a_terminal_says_what_it_waits_for(run: Run) -> None:
    """`route ... -` with nothing piped in waited for stdin without a word: it looked hung."""
    import pty

    parent, child = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "fugu_lite", "route", "--checkpoint", str(run.checkpoint), "-"],
        stdin=child, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    os.close(child)
    os.write(parent, b"write a python function\n\x04")
    stdout, stderr = process.communicate(timeout=120)
    os.close(parent)
    assert process.returncode == 0, stderr
    assert "type the prompt to route, then Ctrl-D" in stderr
    assert chosen(stdout) in WORKERS


def test_route_with_stdin_closed_says_there_is_no_prompt_to_read(tmp_path: Path) -> None:
    """`route -` with stdin closed (`<&-`, a service started without one) ended in an
    AttributeError traceback ('NoneType' object has no attribute 'isatty')."""
    process = subprocess.run(
        [sys.executable, "-m", "fugu_lite", "route", "--checkpoint", str(tmp_path), "-"],
        preexec_fn=lambda: os.close(0), capture_output=True, text=True, timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert process.returncode == 2, process.stderr
    assert "Traceback" not in process.stderr and "AttributeError" not in process.stderr
    assert "error: the prompt '-' reads stdin, which is closed" in process.stderr
    assert process.stdout == ""


def test_route_refuses_excluding_every_worker(run: Run) -> None:
    excludes = [part for worker in WORKERS for part in ("--exclude", worker)]
    result = invoke("route", "--checkpoint", run.checkpoint, *excludes, "hello")
    assert result.exit_code == 2
    message = flat(result.output)
    assert "every worker is excluded" in message
    assert "leave at least one of" in message
    assert "chosen worker" not in message


@pytest.mark.parametrize(("weight", "shown"), [("-1", "-1"), ("nan", "nan"), ("1e400", "inf")])
def test_route_refuses_a_cost_weight_no_router_could_take(
    run: Run, weight: str, shown: str
) -> None:
    """`route --cost-weight -1` on a single checkpoint advised training a router family for
    cost weight -1, which that family then refused as well; then it was refused as "a cost
    weight must be a finite number >= 0, got -1.0", naming no flag. The refusal names
    --cost-weight and what to give."""
    result = invoke("route", "--checkpoint", run.checkpoint, "hi", "--cost-weight", weight)
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"error: --cost-weight {shown} is not a cost weight: give a finite number >= 0 (0: "
        "quality only; the larger, the more a worker's cost counts), or leave it out\n"
    )


def test_route_refuses_an_unknown_worker(run: Run) -> None:
    result = invoke("route", "--checkpoint", run.checkpoint, "--exclude", "nobody", "hello")
    assert result.exit_code == 2
    message = flat(result.output)
    assert "cannot exclude unknown worker(s) ['nobody']" in message
    assert "cheap-small, coder, mathematician" in message


def test_route_refusing_workers_excluded_in_one_comma_list_names_each(run: Run) -> None:
    """`--exclude coder,mathematician` was refused with "did you mean 'mathematician' for
    'coder,mathematician'?": following it excluded mathematician alone, not coder."""
    result = invoke("route", "--checkpoint", run.checkpoint, "--exclude", "coder,mathematician",
                    "hello")  # fmt: skip
    assert result.exit_code == 2
    message = flat(result.output)
    assert "did you mean 'coder', 'mathematician', each on its own, for " in message, message
    assert "did you mean 'mathematician' for" not in message


def test_route_refuses_a_folder_that_is_not_a_checkpoint(tmp_path: Path) -> None:
    result = invoke("route", "--checkpoint", tmp_path, "hello")
    assert result.exit_code == 2
    assert "is not a fugu-lite router checkpoint" in flat(result.output)


def test_route_says_why_a_newer_versions_checkpoint_cannot_load_without_a_traceback(
    tmp_path: Path, tiny_model_cfg: ModelConfig
) -> None:
    """(A checkpoint whose backbone folder moved: test_route_and_eval_take_the_backbone_...)"""
    from fugu_lite.model import RouterModel

    checkpoint = RouterModel(tiny_model_cfg, ["a", "b"], 32).save_checkpoint(tmp_path / "c")
    meta = json.loads((checkpoint / "router.json").read_text())
    meta["model"]["speculative_layers"] = 2  # written by a newer fugu-lite
    (checkpoint / "router.json").write_text(json.dumps(meta))
    result = invoke("route", "--checkpoint", checkpoint, "hello")
    assert result.exit_code == 2, result.output
    assert "unknown key 'speculative_layers'" in flat(result.output)


def test_route_and_eval_take_the_backbone_where_it_is_now(
    tmp_path: Path, tiny_model_cfg: ModelConfig
) -> None:
    """A checkpoint copied to another machine, whose backbone folder is at another path."""
    from fugu_lite.backbones import load_backbone
    from fugu_lite.model import RouterModel

    backbone = load_backbone("tiny-random")
    backbone.model.save_pretrained(tmp_path / "backbone")
    backbone.tokenizer.save_pretrained(tmp_path / "backbone")
    cfg = tiny_model_cfg.model_copy(
        update={"backbone": str(tmp_path / "backbone"), "runtime": "torch"}
    )
    checkpoint = RouterModel(cfg, WORKERS, 32).save_checkpoint(tmp_path / "c")
    (tmp_path / "backbone").rename(tmp_path / "models-here")
    result = invoke("route", "--checkpoint", checkpoint, "hello")
    assert result.exit_code == 2, result.output
    assert "Give the folder it is in now: `--backbone PATH`" in flat(result.output)
    moved = ["--backbone", tmp_path / "models-here"]
    decision = json.loads(ok(invoke("route", "--checkpoint", checkpoint, *moved, "--json", "hi")))
    assert decision["worker"] in WORKERS
    records = tmp_path / "records.jsonl"
    write_records(records, generated_records(n_per_topic=6))
    ok(invoke("eval", "--checkpoint", checkpoint, "-r", records, *moved, "-o", tmp_path / "e"))
    assert (tmp_path / "e" / "evaluation_report.json").exists()
    # eval --pareto loads the checkpoint by another call: dropping its --backbone passed
    ok(invoke("eval", "--checkpoint", checkpoint, "-r", records, *moved, "--pareto",
              "-o", tmp_path / "p"))  # fmt: skip
    assert (tmp_path / "p" / "pareto_report.json").exists()


@pytest.mark.parametrize(
    "kind", ["reward head", "router asked for its cost weight", "router family"]
)
def test_route_takes_the_backbone_where_it_is_now_for_every_kind_of_checkpoint(
    tmp_path: Path, tiny_model_cfg: ModelConfig, kind: str
) -> None:
    """route loads a reward head, a router asked for a cost weight and a router family by
    other calls than a plain router; only the plain router's took --backbone in a test (a
    mutation round saw the others' dropped unnoticed)."""
    from fugu_lite.backbones import load_backbone
    from fugu_lite.model import RouterModel
    from fugu_lite.reward_head import CostAwareRouter
    from fugu_lite.router_family import (
        FamilyManifest,
        FamilyMember,
        member_folder,
        write_family_manifest,
    )

    backbone = load_backbone("tiny-random")
    backbone.model.save_pretrained(tmp_path / "backbone")
    backbone.tokenizer.save_pretrained(tmp_path / "backbone")
    cfg = tiny_model_cfg.model_copy(
        update={"backbone": str(tmp_path / "backbone"), "runtime": "torch"}
    )
    checkpoint = tmp_path / "c"
    if kind == "reward head":
        CostAwareRouter(cfg, WORKERS, 32, [1], 0.5, 0.05).save_checkpoint(checkpoint)
        asked = ["--cost-weight", "0.5"]
    elif kind == "router family":
        members = [FamilyMember(cost_weight=w, checkpoint=member_folder(w)) for w in (0, 1)]
        for member in members:
            RouterModel(cfg, WORKERS, 32).save_checkpoint(checkpoint / member.checkpoint)
        write_family_manifest(checkpoint, FamilyManifest(worker_ids=WORKERS, members=members))
        asked = ["--cost-weight", "1"]
    else:
        RouterModel(cfg, WORKERS, 32).save_checkpoint(checkpoint)
        asked = ["--cost-weight", "0"]
    (tmp_path / "backbone").rename(tmp_path / "models-here")
    result = invoke("route", "--checkpoint", checkpoint, *asked, "hello")
    assert result.exit_code == 2, result.output
    assert "Give the folder it is in now: `--backbone PATH`" in flat(result.output)
    moved = ["--backbone", tmp_path / "models-here"]
    routed = ok(invoke("route", "--checkpoint", checkpoint, *asked, *moved, "--json", "hi"))
    assert json.loads(routed)["worker"] in WORKERS


def test_route_says_a_checkpoint_or_backbone_that_is_a_link_loop_is_one(
    tmp_path: Path, tiny_model_cfg: ModelConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--checkpoint loop` or `--backbone loop`, a link to itself (`ln -s loop loop`): the
    checkpoint was said not to exist, the backbone went to the hub (offline: 'HF_HUB_OFFLINE
    is set, so loop is not downloaded')."""
    from fugu_lite.model import RouterModel

    checkpoint = RouterModel(tiny_model_cfg, WORKERS, 32).save_checkpoint(tmp_path / "c")
    monkeypatch.chdir(tmp_path)
    Path("loop").symlink_to("loop")
    result = invoke("route", "--checkpoint", "loop", "hello")
    assert result.exit_code == 2, result.output
    assert "; it is a link that leads back to itself" in flat(result.output)
    result = invoke("route", "--checkpoint", checkpoint, "--backbone", "loop", "hello")
    assert result.exit_code == 2, result.output
    assert "--backbone loop is a link that leads back to itself" in flat(result.output)


@pytest.mark.parametrize(
    ("kind", "tensors"), [("router", "router_head"), ("reward_head", "reward_head")]
)
@pytest.mark.parametrize("content", ["[]", "null", '"a string"'])
def test_route_refuses_checkpoint_metadata_that_is_not_a_json_object(
    tmp_path: Path, kind: str, tensors: str, content: str
) -> None:
    (tmp_path / f"{tensors}.safetensors").write_bytes(b"")
    (tmp_path / f"{kind}.json").write_text(content)
    result = invoke("route", "--checkpoint", tmp_path, "hello")
    assert result.exit_code == 2, result.output
    assert f"{kind}.json is damaged (a JSON " in flat(result.output)


@pytest.mark.parametrize(
    ("piped", "hint"),
    [
        ("héllo wörld\n".encode("latin-1"), ""),
        ("hello\n".encode("utf-16"), ": it looks UTF-16 encoded"),
    ],
)
def test_route_refuses_a_prompt_piped_in_another_encoding_than_utf8(
    tmp_path: Path, piped: bytes, hint: str
) -> None:
    """A Latin-1 file (or PowerShell's UTF-16 `|`) piped to `route -` was read with
    surrogate escapes and failed in the tokenizer with "'utf-8' codec can't encode
    characters in position 1-1: surrogates not allowed", naming neither stdin nor UTF-8."""
    result = invoke("route", "--checkpoint", tmp_path, "-", input=piped)
    assert result.exit_code == 2
    message = flat(result.output)
    assert "error: the prompt on stdin is not UTF-8 text (invalid" in message
    assert f"byte){hint}" in message
    assert message.rstrip().endswith("; pipe it as UTF-8 (e.g. through `iconv -t UTF-8`)")


def test_routes_help_says_the_prompt_is_utf8_text() -> None:
    """`route --help` did not say the prompt must be UTF-8, though one in another encoding
    (a Latin-1 terminal's argument, a UTF-16 pipe) is now refused before any loading."""
    shown = flat(ok(runner.invoke(app, ["route", "--help"], terminal_width=200)))
    assert "The prompt to route, UTF-8 text ('-' reads stdin" in shown


def test_route_refuses_a_prompt_argument_that_is_not_utf8(tmp_path: Path) -> None:
    """A prompt argument in a Latin-1 terminal reaches Python with surrogate escapes: it
    failed in the tokenizer with "'utf-8' codec can't encode character '\\udce9' in position
    1: surrogates not allowed"."""
    result = invoke("route", "--checkpoint", tmp_path, "h\udce9llo")
    assert result.exit_code == 2
    assert flat(result.output).rstrip() == (
        "error: the prompt argument is not UTF-8 text (the byte 0xe9 at character 2); set "
        "the terminal to UTF-8, or pipe the prompt as UTF-8 to `route -`"
    )


@pytest.fixture(scope="module")
def three_price_head(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A reward head over a premium, a middle and a cheap worker, each a little worse and much
    cheaper than the one before it."""
    from fugu_lite.reward_head_training import RewardHeadConfig, train_reward_head

    folder = tmp_path_factory.mktemp("head")
    cfg = ModelConfig(backbone="tiny-random", layer=-1, head="linear", max_tokens=32,
                      cache_dir=str(folder / "cache"))  # fmt: skip
    workers = ["premium", "middle", "cheap"]
    update = {"worker_ids": workers, "rewards": [1.0, 0.95, 0.9], "costs": [1.0, 0.3, 0.01]}
    records = [r.model_copy(update=update) for r in generated_records(n_per_topic=10)]
    train_reward_head(records, RewardHeadConfig(model=cfg), folder / "head")
    return folder / "head"


def test_route_lists_a_reward_heads_workers_by_utility_where_probabilities_underflow(
    three_price_head: Path,
) -> None:
    """At cost weight 100 every worker but the cheapest gets probability exactly 0 (utility /
    temperature underflows the softmax), and the table listed them in the pool's order: the
    dearest worker before the middle one, though the server falls back to the middle first."""
    args = ("route", "--checkpoint", three_price_head, "--cost-weight", "100", "hello")
    rows = probability_rows(ok(invoke(*args)))
    assert rows["middle"] == 0.0  # underflowed: only the ranking tells it from the dearest
    assert list(rows) == ["cheap", "middle", "premium"]
    assert json.loads(ok(invoke(*args, "--json")))["ranking"] == ["cheap", "middle", "premium"]
    excluded = probability_rows(ok(invoke(*args, "--exclude", "middle")))
    assert list(excluded.items()) == [("cheap", 1.0), ("premium", 0.0), ("middle", "excluded")]


def test_route_prints_the_cost_weight_it_used_as_given(
    three_price_head: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """route printed cost weights with :g (6 significant digits): --cost-weight 0.1234567 as
    'cost weight: 0.123457', 123456.7 as 123457, 1000001 as '1e+06', though --json and the
    routing used the weight given."""
    from rich.console import Console

    from fugu_lite.cli import route
    from fugu_lite.cost_routing import CostRoutingDecision

    for weight in ("0.1234567", "123456.7"):
        args = ("route", "--checkpoint", three_price_head, "--cost-weight", weight, "hello")
        assert f"cost weight: {weight} (reward head: answered exactly)" in flat(ok(invoke(*args)))
    refused = invoke("route", "--checkpoint", three_price_head, "--cost-weight", "-0.1234567", "hi")
    assert refused.exit_code == 2 and "--cost-weight -0.1234567 is not" in refused.stderr
    # a family's member: the weight asked for and the one its head was trained for
    shown = Console(width=200, record=True)
    monkeypatch.setattr(route, "console", shown)
    decision = CostRoutingDecision(worker="cheap", probabilities={"cheap": 1.0}, excluded=[],
                                   ranking=["cheap"], requested_cost_weight=1000001,
                                   cost_weight=0.1234567)  # fmt: skip
    route.print_cost_weight(decision)
    assert shown.export_text() == "cost weight: 1000001 -> head trained for 0.1234567\n"
