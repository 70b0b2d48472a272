"""Routing for the server: which workers a request may use, and batched routing decisions
(one backbone pass for the batch, then each request's head and worker mask)."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..cost_weighting import (
    CostWeightError,
    check_head_cost_weight,
    head_cost_weight,
    nearest_cost_weight,
)
from ..model import RouterModel
from ..router_family import RouterFamily
from ..routing import damaged_backbone_hint, meant_workers, ranked_workers
from ..schemas import ChatMessage
from ..text import exact_number
from .api_error import ApiError

if TYPE_CHECKING:
    from ..reward_head import CostWeightedView


@dataclass(frozen=True)
class RouteRequest:
    prompt: list[ChatMessage]
    allowed: tuple[str, ...]
    cost_weight: float | None = None


@dataclass(frozen=True)
class RouteResult:
    ranking: list[str]
    """The allowed workers, most probable first (by logit, where probabilities underflow to
    0): the choice, then the fallbacks."""
    probabilities: dict[str, float]
    """Over every router worker; excluded workers have 0."""
    cost_weight: float | None
    """The cost weight the head used was trained for (a reward head: the requested one;
    None for a plain checkpoint)."""
    batch_size: int
    forward_s: float


class RouterService:
    """A loaded router (a plain checkpoint or a family over cost weights) and the
    server-wide opt-out list."""

    def __init__(self, family: RouterFamily, opt_out: Sequence[str] = ()) -> None:
        self.family = family
        self.worker_ids = list(family.worker_ids)
        unknown = sorted(set(opt_out) - set(self.worker_ids))
        if unknown:
            raise ValueError(
                f"opt_out names {unknown}, which the router does not know; its workers are "
                f"{', '.join(self.worker_ids)}"
            )
        self.opt_out = [worker for worker in self.worker_ids if worker in set(opt_out)]
        if len(self.opt_out) == len(self.worker_ids):
            raise ValueError(
                f"opt_out lists every worker ({', '.join(self.opt_out)}); leave at least one"
            )
        for router in family.routers:
            router.eval()

    @property
    def supports_cost_weight(self) -> bool:
        return self.family.kind == "family"

    def allowed_workers(
        self,
        exclude: Sequence[str] | None,
        allow: Sequence[str] | None,
        cost_weight: float | None,
    ) -> tuple[str, ...]:
        """The workers a request may be routed to, or a 400 saying why none/what is wrong."""
        self._check_names(exclude, allow)
        self._check_cost_weight(cost_weight)
        removed = set(self.opt_out) | set(exclude or ())
        allowed = tuple(
            worker
            for worker in self.worker_ids
            if worker not in removed and (allow is None or worker in allow)
        )
        if not allowed:
            raise self._no_worker_left(exclude, allow)
        return allowed

    def _check_names(self, exclude: Sequence[str] | None, allow: Sequence[str] | None) -> None:
        """Every worker named is the router's, and `workers` (when given) names one."""
        known = ", ".join(self.worker_ids)
        for param, names in (("exclude_workers", exclude), ("workers", allow)):
            unknown = sorted(set(names or ()) - set(self.worker_ids))
            if unknown:
                raise ApiError(
                    400,
                    f"{param} names unknown worker(s) {unknown}"
                    f"{meant_workers(unknown, self.worker_ids)}; this router's workers: {known}",
                    param=param,
                    code="unknown_worker",
                )
        if allow is not None and not allow:
            raise ApiError(400, f"workers is empty; name one or more of: {known}", param="workers")

    def _check_cost_weight(self, cost_weight: float | None) -> None:
        """A requested cost weight is one this router serves (and its reward head takes)."""
        if cost_weight is None:
            return
        if not self.serves_cost_weight(cost_weight):
            raise ApiError(
                400,
                f"cost_weight is not supported by this server: {self.cost_weight_refusal()}",
                param="cost_weight",
                code="cost_weight_unsupported",
            )
        if self.family.reward_head is not None:
            try:  # here, not in the batch: one request's weight must not fail its batch-mates
                check_head_cost_weight(cost_weight)
            except CostWeightError as error:
                raise ApiError(400, str(error), param="cost_weight") from error

    def _no_worker_left(
        self, exclude: Sequence[str] | None, allow: Sequence[str] | None
    ) -> ApiError:
        """The 400 for a request whose opt-outs, exclusions and allow list leave no worker."""
        reasons = []
        if self.opt_out:
            reasons.append(f"opted out server-wide: {', '.join(self.opt_out)}")
        if exclude:
            reasons.append(f"exclude_workers: {', '.join(exclude)}")
        if allow is not None:
            reasons.append(f"workers allows only: {', '.join(allow)}")
        return ApiError(
            400,
            "no worker is left to answer (" + "; ".join(reasons) + "); allow at least one "
            f"of: {', '.join(w for w in self.worker_ids if w not in self.opt_out)}",
            param="exclude_workers" if exclude else "workers",
            code="no_worker_left",
        )

    def serves_cost_weight(self, cost_weight: float) -> bool:
        """A family or reward head with costs serves any; a single checkpoint only the one it
        was trained with (what it answers anyway)."""
        return self.supports_cost_weight or cost_weight == self.family.cost_weights[0]

    def cost_weight_refusal(self) -> str:
        if self.family.reward_head is not None:
            return (
                "its reward head was trained on records without costs, so it predicts none; "
                "leave cost_weight out, or serve a reward head trained on records with `costs`"
            )
        return (
            f"its router is a single checkpoint (trained with cost weight "
            f"{exact_number(self.family.cost_weights[0])}, the only one it serves); leave "
            "cost_weight out, "
            "or serve a router family "
            "(`fugu-lite train pipeline --cost-weights 0,0.25,0.5,1`) or a reward head "
            "(`fugu-lite train reward-head`)"
        )

    def member_for(
        self, cost_weight: float | None
    ) -> tuple[RouterModel | CostWeightedView, float | None]:
        """The head trained for the nearest cost weight (the smallest when None); a reward
        head answers the requested weight itself (0 when None)."""
        if not self.supports_cost_weight:
            used = None if cost_weight is None else self.family.cost_weights[0]
            return self.family.routers[0], used
        if self.family.reward_head is not None:
            used = head_cost_weight(cost_weight)
            return self.family.reward_head.at_cost_weight(used), used
        weights = self.family.cost_weights
        used = min(weights) if cost_weight is None else nearest_cost_weight(weights, cost_weight)
        return self.family.routers[weights.index(used)], used

    def route_batch(self, requests: list[RouteRequest]) -> list[RouteResult]:
        """One backbone pass for every prompt (family members share the backbone), then
        one head pass per cost-weight member, each row with its own worker mask."""
        started = time.perf_counter()
        used_weights = [self.member_for(request.cost_weight)[1] for request in requests]
        members: dict[float | None, list[int]] = {}
        for index, used in enumerate(used_weights):
            members.setdefault(used, []).append(index)
        probabilities: list[list[float]] = [[] for _ in requests]
        # The ranking follows the logits: far behind the best (a reward head at a large cost
        # weight), several workers' probabilities underflow to exactly 0 and would tie.
        scores: list[list[float]] = [[] for _ in requests]
        with torch.inference_mode():
            extractor = self.family.routers[0].backbone_extractor()
            features = extractor.encode([request.prompt for request in requests])
            for used, indices in members.items():
                router = self.member_for(used)[0]
                logits = router(features=features[indices].to(router.device_ref))
                mask = torch.stack([router.worker_mask(requests[i].allowed) for i in indices])
                masked = logits.masked_fill(~mask, float("-inf"))
                rows = torch.softmax(masked, dim=-1).tolist()
                for index, row, score in zip(indices, rows, masked.tolist(), strict=True):
                    probabilities[index], scores[index] = row, score
        forward_s = time.perf_counter() - started
        results = []
        for request, row, score, used in zip(
            requests, probabilities, scores, used_weights, strict=True
        ):
            values = dict(zip(self.worker_ids, row, strict=True))
            by_score = dict(zip(self.worker_ids, score, strict=True))
            ranking = ranked_workers(request.allowed, by_score)
            results.append(RouteResult(ranking, values, used, len(requests), forward_s))
        return results

    def require_finite(self, result: RouteResult) -> RouteResult:
        """`result`, unless its probabilities are NaN or infinite (the backbone's features
        for its prompt are): its ranking would be arbitrary. A 500 for this request alone,
        not its batch-mates."""
        if all(math.isfinite(p) for p in result.probabilities.values()):
            return result
        backbone = self.family.routers[0].model_cfg.backbone
        raise ApiError(
            500,
            "routing gave NaN or infinite probabilities for this request's prompt: "
            + damaged_backbone_hint(backbone, "it", "this prompt"),
            type="server_error",
            code="routing_failed",
        )

    def warm_up(self) -> None:
        """Load the backbone and run one pass, so the first request is not slow."""
        allowed = tuple(w for w in self.worker_ids if w not in self.opt_out)
        self.route_batch([RouteRequest([ChatMessage(role="user", content="warm-up")], allowed)])
