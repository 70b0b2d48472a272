"""Singular-value fine-tuning (SVF): learned offsets for the singular values of a few
backbone weight matrices.

For each target matrix W = U diag(s) V^T (decomposed once, at set-up) the router learns
offsets d (zero at start) and uses

    W' = U diag(s') V^T,   s' = s * (1 + d) * sum(s) / sum(s * (1 + d))

so the sum of the singular values stays what it was. The backbone itself is never
modified: the feature extractor runs with W' substituted for W (`torch.func.functional_call`),
so gradients reach d and the same backbone object can serve other models unchanged.

Targets name weight matrices by their module name in the backbone as loaded (the base
model, without a "model." prefix): e.g. `layers.3.mlp.down_proj` (Llama / SmolLM2) or
`encoder.layer.3.output.dense` (BERT / MiniLM). A target is a glob pattern matched against
the whole name (`*` also matches dots: `layers.*.mlp.down_proj` is every block's), a plain
name must match exactly, and a trailing `.weight` is ignored. Only matrices the features
use count: blocks after `model.layer` are never run, so targets there are refused.
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Iterable, Sequence
from typing import cast

import torch
from torch import nn

from .config_errors import ConfigError

WILDCARD_EXAMPLE = "layers.*.mlp.down_proj"


class SVFTargetError(ConfigError):
    """An `svf_targets` entry matches no weight matrix the features use."""


def weight_matrix_names(module: nn.Module) -> list[str]:
    """Names of the submodules that own a 2-D `weight` parameter, in module order."""
    return [
        name
        for name, submodule in module.named_modules()
        if name
        and isinstance(getattr(submodule, "weight", None), nn.Parameter)
        and submodule.weight.dim() == 2
    ]


def resolve_targets(
    targets: Sequence[str], used: nn.Module, full: nn.Module, backbone: str, layer: int
) -> list[str]:
    """The matrix names the targets select among those of `used` (the blocks the features
    run), deduplicated in the order the targets name them; a target that selects nothing
    is a SVFTargetError naming the target, the reason and names that would work."""
    used_names = weight_matrix_names(used)
    all_names = weight_matrix_names(full)
    resolved: list[str] = []
    for target in targets:
        pattern = target.removesuffix(".weight")
        matches = [name for name in used_names if fnmatch.fnmatchcase(name, pattern)]
        if not matches:
            later = [name for name in all_names if fnmatch.fnmatchcase(name, pattern)]
            if later:
                raise SVFTargetError(
                    f"model.svf_targets: {target!r} names {_listing(later)}, in blocks after "
                    f"the feature layer (model.layer={layer}); those blocks never run, so their "
                    f"singular values cannot change the features. Target an earlier block or "
                    f"raise model.layer."
                )
            raise SVFTargetError(_no_match_message(target, pattern, used_names, backbone))
        resolved.extend(name for name in matches if name not in resolved)
    return resolved


def _no_match_message(target: str, pattern: str, names: list[str], backbone: str) -> str:
    close = difflib.get_close_matches(pattern, names, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(repr(name) for name in close)}? " if close else ""
    return (
        f"model.svf_targets: {target!r} matches no weight matrix of backbone {backbone!r} "
        f"that the features use. {hint}Its matrices are named like {_listing(names, 8)} "
        f"({len(names)} in all); a target is a module name or a glob pattern over the names, "
        f"e.g. {WILDCARD_EXAMPLE!r}."
    )


def _listing(names: list[str], limit: int = 4) -> str:
    shown = ", ".join(names[:limit])
    return shown + (", ..." if len(names) > limit else "")


def _key(name: str) -> str:
    return name.replace(".", "__")  # module-dict keys may not contain dots


class SingularValueOffsets(nn.Module):
    """The offsets d of one matrix, and the matrix W' they give."""

    weight: torch.Tensor  # buffers, registered in __init__
    u: torch.Tensor
    s: torch.Tensor
    vh: torch.Tensor

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        weight = weight.detach()
        u, s, vh = torch.linalg.svd(weight.double(), full_matrices=False)
        # Buffers, not checkpoint tensors: they are recomputed from the backbone at set-up.
        self.register_buffer("weight", weight, persistent=False)
        self.register_buffer("u", u.to(weight.dtype), persistent=False)
        self.register_buffer("s", s.to(weight.dtype), persistent=False)
        self.register_buffer("vh", vh.to(weight.dtype), persistent=False)
        self.offsets = nn.Parameter(torch.zeros_like(self.s))

    def singular_values(self) -> torch.Tensor:
        """s' = s (1 + d), rescaled to the original sum of singular values."""
        shifted = self.s * (1 + self.offsets)
        return shifted * (self.s.sum() / shifted.sum())

    def forward(self) -> torch.Tensor:
        # W + U diag(s' - s) V^T equals U diag(s') V^T up to the float error of the SVD,
        # and is exactly W when d = 0 (s' - s is then exactly 0).
        return self.weight + (self.u * (self.singular_values() - self.s)) @ self.vh


class SVF(nn.Module):
    """The offsets of every target matrix of one backbone."""

    def __init__(self, names: Sequence[str], weights: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.names = list(names)
        self.matrices = nn.ModuleDict(
            {_key(name): SingularValueOffsets(weights[name]) for name in self.names}
        )

    @classmethod
    def for_backbone(
        cls, targets: Sequence[str], used: nn.Module, full: nn.Module, backbone: str, layer: int
    ) -> SVF:
        names = resolve_targets(targets, used, full, backbone, layer)
        modules = dict(used.named_modules())
        return cls(names, {name: modules[name].weight for name in names})

    def matrix(self, name: str) -> SingularValueOffsets:
        return cast(SingularValueOffsets, self.matrices[_key(name)])

    def weights(self) -> dict[str, torch.Tensor]:
        """{"<module>.weight": W'} for `functional_call` on the backbone."""
        return {f"{name}.weight": self.matrix(name)() for name in self.names}

    def offset_count(self) -> int:
        matrices = cast(Iterable[SingularValueOffsets], self.matrices.values())
        return sum(matrix.offsets.numel() for matrix in matrices)

    def shapes(self) -> dict[str, list[int]]:
        return {name: list(self.matrix(name).weight.shape) for name in self.names}
