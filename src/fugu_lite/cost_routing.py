"""Routing with a request's cost weight: a router family answers with the member trained for
the nearest cost weight, a reward head with the requested weight itself; `route_checkpoint`
routes one prompt with any checkpoint (`fugu-lite route`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field, field_validator

from .cost_weighting import (
    CostWeightError,
    check_cost_weight,
    head_cost_weight,
    nearest_cost_weight,
)
from .features import Prompt
from .model import load_router
from .router_family import (
    RouterFamily,
    is_router_family,
    load_router_family,
    trained_cost_weighting,
)
from .routing import (
    RoutingDecision,
    allowed_workers,
    decisions_from_logits,
    route_prompts,
)
from .text import exact_number

if TYPE_CHECKING:
    from .reward_head import CostAwareRouter


class CostRoutingDecision(RoutingDecision):
    requested_cost_weight: float | None
    cost_weight: float = Field(
        description="The cost weight the answer used: the one the family member was trained "
        "for, or the requested one itself for a reward head."
    )
    predicted_rewards: dict[str, float] | None = Field(
        default=None, description="A reward head's predicted reward per worker."
    )
    predicted_costs: dict[str, float] | None = Field(
        default=None, description="A reward head's predicted cost per worker."
    )

    @field_validator("requested_cost_weight")
    @classmethod
    def _minus_zero_is_zero(cls, requested: float | None) -> float | None:
        """`--cost-weight -0` asks for 0, and was echoed as -0 (-0.0 in JSON)."""
        return None if requested is None else requested + 0.0  # -0.0 + 0.0 is 0.0


def route_with_cost_weight(
    family: RouterFamily,
    prompts: Sequence[Prompt],
    cost_weight: float | None,
    exclude: Sequence[str] = (),
) -> list[CostRoutingDecision]:
    """Route prompts with the member trained for the nearest cost weight (see
    `nearest_cost_weight`); None uses the family's smallest cost weight. A reward head
    answers the requested cost weight exactly (None = 0)."""
    if family.reward_head is not None:
        return route_with_reward_head(family.reward_head, prompts, cost_weight, exclude)
    if family.kind != "family":
        raise CostWeightError(f"{family.directory} is a single checkpoint, not a router family")
    used = (
        min(family.cost_weights)
        if cost_weight is None
        else nearest_cost_weight(family.cost_weights, cost_weight)
    )
    router = family.routers[family.cost_weights.index(used)]
    return [
        CostRoutingDecision(
            **decision.model_dump(), requested_cost_weight=cost_weight, cost_weight=used
        )
        for decision in route_prompts(router, prompts, exclude)
    ]


def route_with_reward_head(
    head: CostAwareRouter,
    prompts: Sequence[Prompt],
    cost_weight: float | None,
    exclude: Sequence[str] = (),
) -> list[CostRoutingDecision]:
    """argmax of predicted reward - cost_weight * predicted cost / reference over the allowed
    workers, with the predictions and softmax(utility / temperature) as probabilities."""
    import torch

    used = head_cost_weight(cost_weight)
    allowed = allowed_workers(head.worker_ids, exclude)
    view = head.at_cost_weight(used)
    features = head.features_for(list(prompts), use_cache=False)
    logits = view.allowed_logits(features, allowed).cpu()
    decisions = decisions_from_logits(view, logits, prompts, allowed, exclude)
    with torch.inference_mode():
        rewards, costs = (value.cpu() for value in head.predict(features))
    return [
        CostRoutingDecision(
            **decision.model_dump(),
            requested_cost_weight=cost_weight,
            cost_weight=used,
            predicted_rewards=dict(zip(head.worker_ids, reward_row.tolist(), strict=True)),
            predicted_costs=(
                dict(zip(head.worker_ids, cost_row.tolist(), strict=True))
                if head.predicts_costs
                else None
            ),
        )
        for decision, reward_row, cost_row in zip(decisions, rewards, costs, strict=True)
    ]


def route_checkpoint(
    checkpoint: str | Path,
    prompt: Prompt,
    exclude: Sequence[str] = (),
    cost_weight: float | None = None,
    backbone: str | None = None,
) -> RoutingDecision:
    """Route one prompt with a plain checkpoint, a family or a reward head; a cost weight
    needs a family or a reward head (trained on records with costs). `backbone`: where the
    checkpoint's backbone is now (see checkpoint_backbone.locate_backbone)."""
    from .reward_head import is_reward_head, load_reward_head

    if cost_weight is not None:  # before any loading, and for a single checkpoint too
        check_cost_weight(cost_weight)
    if is_reward_head(checkpoint):
        head = load_reward_head(checkpoint, backbone=backbone)
        return route_with_reward_head(head, [prompt], cost_weight, exclude)[0]
    if is_router_family(checkpoint):
        family = load_router_family(checkpoint, backbone)
        return route_with_cost_weight(family, [prompt], cost_weight, exclude)[0]
    if cost_weight is None:
        return route_prompts(load_router(checkpoint, backbone=backbone), [prompt], exclude)[0]
    # a checkpoint that records no cost weighting was trained without one: weight 0
    trained = trained_cost_weighting(checkpoint)["cost_weight"]
    if cost_weight != trained:
        raise CostWeightError(
            f"{checkpoint} is a single router checkpoint (trained with cost weight "
            f"{exact_number(trained)}), so it cannot serve cost weight "
            f"{exact_number(cost_weight)}; train a router "
            "family with `fugu-lite train pipeline ... --cost-weights 0,0.25,0.5,1` or a "
            "reward head with `fugu-lite train reward-head ...` and pass its folder, or leave "
            "out --cost-weight"
        )
    decision = route_prompts(load_router(checkpoint, backbone=backbone), [prompt], exclude)[0]
    # the cost weight it was trained with: what it answers anyway
    return CostRoutingDecision(
        **decision.model_dump(), requested_cost_weight=cost_weight, cost_weight=trained
    )
