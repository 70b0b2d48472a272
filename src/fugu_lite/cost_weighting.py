"""Cost-weighted rewards and the cost weights themselves.

Training with a cost weight lambda replaces every reward by

    reward' = reward - lambda * cost / reference_cost

where `reference_cost` defaults to the mean cost over the train split's cells (every
train prompt x every worker), so lambda = 1 charges one reward point for a worker of
average cost. This module holds that reward, the reference cost, the checks on records'
costs, and the parsing and checking of cost weights; a family of routers over cost weights
lives in `router_family.py`, routing with a request's cost weight in `cost_routing.py`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

from .checkpoint import CheckpointError
from .config import MAX_COST_WEIGHT, CostAware
from .schemas import RewardRecord, records_in_split
from .text import exact_number


class CostWeightError(CheckpointError):
    """A cost weight was asked of a checkpoint that was not trained for cost weights,
    or a family manifest is missing or inconsistent."""


# The splits the training stages read (the test split is evaluation's: it needs no costs).
TRAINING_SPLITS = ("train", "validation")
TRAINING_FIX = "set reference_cost explicitly or leave cost_weight at 0"


def default_reference_cost(records: Sequence[RewardRecord], fix: str = TRAINING_FIX) -> float:
    """Mean cost over every (train prompt, worker) cell; `fix` ends the errors with what the
    caller's user can do."""
    train = records_in_split(list(records), "train")
    if not train:
        raise ValueError(
            "the default reference cost is the mean train cost, but there are no train "
            "records; set reference_cost explicitly"
        )
    # Callers check costs first; kept so that a new one never gets the mean of some prompts.
    require_costs(train, "the default reference cost", fix)
    cells = [cost for record in train for cost in record.costs or []]
    mean = math.fsum(cells) / len(cells)
    if mean <= 0:
        raise ValueError(f"every train cost is 0, so costs cannot be scaled by their mean; {fix}")
    return mean


def resolve_reference_cost(records: Sequence[RewardRecord], settings: CostAware) -> float:
    """The configured reference cost, or the mean train cost when it is None."""
    if settings.reference_cost is not None:
        return settings.reference_cost
    return default_reference_cost(records)


def training_records(records: Sequence[RewardRecord]) -> list[RewardRecord]:
    """The records the training stages read: the train split (to fit) and the validation
    split (to choose and report); the test split is evaluation's."""
    return [record for record in records if record.split in TRAINING_SPLITS]


def require_costs(
    records: Sequence[RewardRecord],
    purpose: str,
    fix: str = "give every record `costs` or set cost_weight to 0",
    counted: str = "records",
) -> None:
    """Refuse records without per-worker costs, naming the first one and the count;
    `counted` says what `records` are (e.g. the splits they were taken from)."""
    missing = [index for index, record in enumerate(records) if record.costs is None]
    if not missing:
        return
    record = records[missing[0]]
    # Callers pass the records of some splits: a place among them is not one in the file.
    name = f"record id={record.id!r}" if record.id is not None else "a record without an id"
    lack, which = ("has", "it") if len(missing) == 1 else ("have", "the first")
    raise ValueError(
        f"{purpose} needs per-worker costs, but {len(missing)} of {len(records)} {counted} {lack} "
        f"none, {which} is {name} ({record.split} split, prompt "
        f"{record.prompt_text[:60]!r}); {fix}"
    )


def apply_cost_weight(records: list[RewardRecord], settings: CostAware) -> list[RewardRecord]:
    """Records with reward' = reward - cost_weight * cost / reference_cost (costs kept).

    With cost_weight 0 the records are returned unchanged (and need no costs)."""
    if settings.cost_weight == 0:
        return records
    require_costs(
        records,
        f"cost_weight={settings.cost_weight:g}",
        counted="records of the train and validation splits",
    )
    scale = settings.cost_weight / resolve_reference_cost(records, settings)
    return [
        record.model_copy(
            update={
                "rewards": [
                    reward - scale * cost
                    for reward, cost in zip(record.rewards, record.costs or [], strict=True)
                ]
            }
        )
        for record in records
    ]


def cost_weighting_summary(records: Sequence[RewardRecord], settings: CostAware) -> dict:
    """What a stage records in its report and checkpoint: the lambda and reference cost used
    (reference None when lambda is 0 and none was configured: nothing was scaled)."""
    reference = settings.reference_cost
    if settings.cost_weight > 0:
        reference = resolve_reference_cost(records, settings)
    return {"cost_weight": settings.cost_weight, "reference_cost": reference}


def normalized_cost_weights(cost_weights: Sequence[float]) -> list[float]:
    """Sorted, without repeats; each one finite, >= 0 and at most MAX_COST_WEIGHT (-0 is 0,
    not a folder lambda--0)."""
    weights = sorted({float(weight) + 0.0 for weight in cost_weights})  # -0.0 + 0.0 is 0.0
    if not weights:
        raise ValueError("give at least one cost weight, e.g. 0,0.25,0.5,1")
    bad = [
        weight
        for weight in weights
        if not math.isfinite(weight) or weight < 0 or weight > MAX_COST_WEIGHT
    ]
    if bad:
        raise ValueError(
            f"cost weights must be finite and >= 0, at most {MAX_COST_WEIGHT:,.0f} (larger "
            f"ones overflow the weighted rewards), got {bad}"
        )
    return weights


def parse_cost_weights(text: str) -> list[float]:
    """ "0,0.25,0.5" -> [0.0, 0.25, 0.5]."""
    values = []
    for part in filter(None, (part.strip() for part in text.split(","))):
        try:
            values.append(float(part))
        except ValueError as error:
            raise ValueError(
                f"{part!r} is not a number; cost weights are comma-separated numbers, e.g. "
                "0,0.25,0.5,1"
            ) from error
    return normalized_cost_weights(values)


def check_cost_weight(cost_weight: float) -> None:
    if not math.isfinite(cost_weight) or cost_weight < 0:
        raise CostWeightError(f"a cost weight must be a finite number >= 0, got {cost_weight}")


def nearest_cost_weight(cost_weights: Sequence[float], requested: float) -> float:
    """The trained cost weight nearest to the requested one; a tie goes to the smaller
    (quality-first) weight, and requests beyond either end get that end."""
    check_cost_weight(requested)
    asked = written_value(requested)
    return min(sorted(cost_weights), key=lambda weight: abs(written_value(weight) - asked))


def written_value(weight: float) -> Fraction:
    """A weight as written (0.2 is 1/5), exactly: binary floats made 0.2 nearer to 0.3 than
    to 0.1 (0.3 - 0.2 < 0.2 - 0.1 in floats), so a tie went to the larger weight."""
    return Fraction(repr(float(weight)))


def head_cost_weight(requested: float | None) -> float:
    """The cost weight a reward head answers: the requested one, 0 when none is (and -0 as
    0, which a decision would otherwise report as -0.0)."""
    return 0.0 if requested is None else float(requested) + 0.0  # -0.0 + 0.0 is 0.0


def check_head_cost_weight(cost_weight: float) -> None:
    """What a reward head answers: a finite cost weight >= 0, at most MAX_COST_WEIGHT."""
    check_cost_weight(cost_weight)
    if cost_weight > MAX_COST_WEIGHT:
        raise CostWeightError(
            f"a reward head answers cost weights up to {MAX_COST_WEIGHT:,.0f}, got "
            f"{exact_number(cost_weight)}: larger ones overflow its utilities (at "
            f"{MAX_COST_WEIGHT:,.0f} a reward point already weighs a millionth of the "
            "reference cost); ask for "
            f"{MAX_COST_WEIGHT:,.0f} or less"
        )
