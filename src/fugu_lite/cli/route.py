"""`fugu-lite route`: the worker a router picks for one prompt."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Column, Table

from ..text import console_name, cost_text, exact_number
from ..text_reading import utf16_hint
from .common import BackboneOption, CheckpointOption, console, err_console, fail

if TYPE_CHECKING:
    from ..routing import RoutingDecision


def route_command(
    checkpoint: CheckpointOption,
    prompt: Annotated[
        str,
        typer.Argument(
            help="The prompt to route, UTF-8 text ('-' reads stdin, less its last line break); "
            "one that starts with '-' goes after '--': route --checkpoint DIR -- '-5 + 3?'."
        ),
    ],
    exclude: Annotated[
        list[str] | None,
        typer.Option("--exclude", metavar="<worker>", help="Worker to opt out of (repeatable)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    cost_weight: Annotated[
        float | None,
        typer.Option(
            "--cost-weight",
            help="Trade quality for cost (needs a router family or a reward head): a family's "
            "head trained for the nearest cost weight answers; a reward head answers any. "
            "Omitted: the smallest cost weight (0 for a reward head).",
        ),
    ] = None,
    backbone: BackboneOption = None,
) -> None:
    """Print the worker the router picks for one prompt, and the probabilities."""
    from ..cost_routing import route_checkpoint

    check_cost_weight_option(cost_weight)
    text = prompt_text(prompt)
    try:
        decision = route_checkpoint(checkpoint, text, exclude or [], cost_weight, backbone)
    except (ValueError, RuntimeError, OSError) as error:  # a checkpoint or its backbone
        fail(str(error))
    if as_json:
        print(json.dumps(decision.model_dump()))
        return
    print_cost_weight(decision)
    console.print(f"chosen worker: [bold]{console_name(decision.worker)}[/bold]")
    console.print(decision_table(decision))


def check_cost_weight_option(cost_weight: float | None) -> None:
    """A negative or not finite --cost-weight: it was refused as "a cost weight must be a
    finite number >= 0, got -1.0", naming no flag (a router family's are --cost-weights)."""
    from ..cost_weighting import CostWeightError, check_cost_weight

    if cost_weight is None:
        return
    try:
        check_cost_weight(cost_weight)
    except CostWeightError:
        fail(
            f"--cost-weight {exact_number(cost_weight)} is not a cost weight: give a finite "
            "number >= 0 (0: quality only; the larger, the more a worker's cost counts), or "
            "leave it out"
        )


def prompt_text(prompt: str) -> str:
    """The prompt argument, or stdin's text for '-'; an empty one is refused."""
    if prompt == "-" and sys.stdin is None:  # `<&-`: Python gives no stdin at all
        fail(
            "the prompt '-' reads stdin, which is closed; pipe the prompt in, or give it as "
            "the argument"
        )
    if prompt == "-" and sys.stdin.isatty():  # nothing piped: it would wait without a word
        err_console.print("type the prompt to route, then Ctrl-D on a line of its own")
    # `echo PROMPT |` (and a file's last line) ends in a line break the prompt does not hold:
    # routed with it, its probabilities differed from `route PROMPT`'s
    text = strip_line_end(stdin_text()) if prompt == "-" else argument_text(prompt)
    if not text.strip():
        fail("the prompt is empty; give the text to route, or '-' and pipe it on stdin")
    return text


def argument_text(prompt: str) -> str:
    """The prompt argument; one that reached Python with surrogate escapes (a Latin-1
    terminal's bytes) is refused here, not in the tokenizer ("surrogates not allowed")."""
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as error:
        code = ord(prompt[error.start])
        # U+DC80..U+DCFF: surrogateescape's stand-ins for the bytes 0x80..0xff
        what = f"the byte {code - 0xDC00:#04x}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}"
        fail(
            f"the prompt argument is not UTF-8 text ({what} at character {error.start + 1}); "
            "set the terminal to UTF-8, or pipe the prompt as UTF-8 to `route -`"
        )
    return prompt


def stdin_text() -> str:
    """stdin's text; bytes that are not UTF-8 (a Latin-1 file, PowerShell's UTF-16 pipe) are
    refused, naming stdin: read as text they failed in the tokenizer ("surrogates not
    allowed") or with a traceback."""
    payload = sys.stdin.buffer.read()
    try:
        # the BOM of a file saved as "UTF-8 with BOM" is no part of the prompt: routed with
        # it, its probabilities differed from `route PROMPT`'s
        return payload.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as error:
        fail(
            f"the prompt on stdin is not UTF-8 text ({error.reason}){utf16_hint(payload)}; "
            "pipe it as UTF-8 (e.g. through `iconv -t UTF-8`)"
        )


def print_cost_weight(decision: RoutingDecision) -> None:
    """The cost weight a family's head or a reward head answered for (nothing for a plain
    checkpoint), every digit as given: :g printed 0.1234567 as 0.123457."""
    from ..cost_routing import CostRoutingDecision

    if isinstance(decision, CostRoutingDecision) and decision.predicted_rewards is not None:
        console.print(
            f"cost weight: {exact_number(decision.cost_weight)} (reward head: answered exactly)"
        )
    elif isinstance(decision, CostRoutingDecision):
        requested = decision.requested_cost_weight
        console.print(
            f"cost weight: {'default' if requested is None else exact_number(requested)} -> "
            f"head trained for {exact_number(decision.cost_weight)}"
        )


def decision_table(decision: RoutingDecision) -> Table:
    """Each worker's probability in the decision's ranking, the excluded ones last (a reward
    head's predicted reward and cost beside it); an excluded worker says so."""
    from ..cost_routing import CostRoutingDecision

    rewards: dict[str, float] | None = None
    costs: dict[str, float] = {}
    if isinstance(decision, CostRoutingDecision):
        rewards, costs = decision.predicted_rewards, decision.predicted_costs or {}
    table = Table(Column("worker", overflow="fold"), "probability")  # ids never cut
    if rewards:
        table.add_column("predicted reward")
        table.add_column("predicted cost")
    excluded = [worker for worker in decision.probabilities if worker not in decision.ranking]
    for worker in [*decision.ranking, *excluded]:
        probability = decision.probabilities[worker]
        cells = ["excluded" if worker in decision.excluded else f"{probability:.4f}"]
        if rewards:
            cost = costs.get(worker)
            cells += [f"{rewards[worker]:.4f}", "—" if cost is None else cost_text(cost)]
        table.add_row(console_name(worker), *cells)
    return table


def strip_line_end(text: str) -> str:
    """`text` without the one line break that ends it, if any (`\n` or `\r\n`)."""
    return text.removesuffix("\n").removesuffix("\r") if text.endswith("\n") else text
