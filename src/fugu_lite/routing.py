"""One routing decision: a prompt in, the chosen worker and the probabilities out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import torch
from pydantic import BaseModel, Field

from .config_errors import close_keys
from .features import Prompt, prompt_text
from .model import RouterModel
from .text import names_line

if TYPE_CHECKING:
    from .reward_head import CostWeightedView


class NoWorkerLeftError(ValueError):
    """Every worker was excluded."""


class RoutingDecision(BaseModel):
    worker: str
    probabilities: dict[str, float]
    excluded: list[str]
    ranking: list[str] = Field(
        description="The allowed workers, the choice first, then the order a server falls "
        "back in (ranked_workers)."
    )


def ranked_workers(allowed: Sequence[str], logits: Mapping[str, float]) -> list[str]:
    """The allowed workers, highest logit first. Not by probability: far behind the best (a
    reward head at a large cost weight) probabilities underflow to exactly 0, and such
    workers tied, in the pool's order (the dearest before a cheaper one)."""
    return sorted(allowed, key=lambda worker: -logits[worker])


def excluded_workers(exclude: Sequence[str]) -> list[str]:
    """The excluded workers once each, in the order given (`--exclude a --exclude a`)."""
    return list(dict.fromkeys(exclude))


def allowed_workers(worker_ids: Sequence[str], exclude: Sequence[str]) -> list[str]:
    unknown = sorted(set(exclude) - set(worker_ids))
    if unknown:
        raise NoWorkerLeftError(
            f"cannot exclude unknown worker(s) {unknown}{meant_workers(unknown, worker_ids)}; "
            f"this router's workers: {names_line(worker_ids)}"
        )
    allowed = [worker for worker in worker_ids if worker not in set(exclude)]
    if not allowed:
        raise NoWorkerLeftError(
            f"every worker is excluded ({names_line(excluded_workers(exclude))}); leave at "
            f"least one of {names_line(worker_ids)}"
        )
    return allowed


def meant_workers(unknown: Sequence[str], worker_ids: Sequence[str]) -> str:
    """' (did you mean 'coder' for 'Coder'?)' for the unknown ids close to a worker's, or ''."""
    meant = [hint for name in unknown if (hint := meant_worker(name, worker_ids))]
    return f" (did you mean {', '.join(meant)}?)" if meant else ""


def meant_worker(name: str, worker_ids: Sequence[str]) -> str | None:
    """The worker (or, for a comma list of them, the workers) an unknown id may mean: the
    closest id alone told `coder,mathematician` to exclude mathematician, not coder."""
    parts = [part.strip() for part in name.split(",")]
    if len(parts) > 1 and all(part in worker_ids for part in parts):
        return f"{', '.join(repr(part) for part in parts)}, each on its own, for {name!r}"
    close = close_keys(name, list(worker_ids))
    return f"{close[0]!r} for {name!r}" if close else None


def route_prompts(
    model: RouterModel | CostWeightedView, prompts: Sequence[Prompt], exclude: Sequence[str] = ()
) -> list[RoutingDecision]:
    """Route a batch; excluded workers get probability 0 and the rest are renormalised."""
    allowed = allowed_workers(model.worker_ids, exclude)
    features = model.features_for(list(prompts), use_cache=False)
    logits = model.allowed_logits(features, allowed).cpu()
    return decisions_from_logits(model, logits, prompts, allowed, exclude)


def decisions_from_logits(
    model: RouterModel | CostWeightedView,
    logits: torch.Tensor,
    prompts: Sequence[Prompt],
    allowed: Sequence[str],
    exclude: Sequence[str],
) -> list[RoutingDecision]:
    """Each prompt's decision from its row of logits (-inf for a worker not allowed): the
    softmax's argmax, its probabilities, and the allowed workers ranked by logit."""
    probabilities = torch.softmax(logits, dim=-1)
    require_finite_probabilities(probabilities, prompts, model.model_cfg.backbone)
    return [
        RoutingDecision(
            worker=model.worker_ids[int(row.argmax())],
            probabilities=dict(zip(model.worker_ids, row.tolist(), strict=True)),
            excluded=excluded_workers(exclude),
            ranking=ranked_workers(
                allowed, dict(zip(model.worker_ids, logit_row.tolist(), strict=True))
            ),
        )
        for row, logit_row in zip(probabilities, logits, strict=True)
    ]


def require_finite_probabilities(
    probabilities: torch.Tensor, prompts: Sequence[Prompt], backbone: str
) -> None:
    """Refuse NaN or infinite probabilities (the head's weights are checked when loaded, so
    the backbone's features are to blame): argmax took the first worker for them, silently,
    and `route --json` printed NaN, which is not JSON."""
    bad = (~torch.isfinite(probabilities)).any(dim=1).nonzero().flatten().tolist()
    if bad:
        raise ValueError(
            f"routing gave NaN or infinite probabilities for {len(bad)} of the {len(prompts)} "
            f"prompts (the first: {prompt_text(prompts[bad[0]])[:60]!r}): "
            + damaged_backbone_hint(backbone, "them", "these prompts")
        )


def damaged_backbone_hint(backbone: str, them: str, these: str) -> str:
    """What non-finite routing probabilities for some prompts (`them`, `these`) say of the
    backbone, and what to check."""
    return (
        f"the backbone {backbone} gives NaN, infinite or overflowing features for {them} (its "
        f"weights are damaged, or overflow on {these}); check model.backbone (a local folder: "
        "its weight files), or choose another backbone"
    )


def route_prompt(
    model: RouterModel, prompt: Prompt, exclude: Sequence[str] = ()
) -> RoutingDecision:
    return route_prompts(model, [prompt], exclude)[0]
