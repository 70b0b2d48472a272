"""The cost-quality plot of a pareto report: every curve, the workers (labelled where no
label hides another) and the oracle."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.transforms import Bbox

from .plots import legend_beside, plain_labels, plain_text


def plot_pareto(report: dict) -> Figure:
    """Every curve's points and hull (dashed where extended flat), the workers, the oracle."""
    figure = Figure(figsize=(8.0, 5.5), layout="constrained")
    axes = figure.add_subplot()
    _draw_curves(axes, report)
    oracle = report["oracle"]
    axes.scatter(
        [oracle["mean_cost"]], [oracle["mean_reward"]], marker="*", s=120, color="tab:green",
        label="oracle (cheapest correct)", zorder=4,
    )  # fmt: skip
    _draw_target(axes, report)
    axes.set_xlabel("mean cost per prompt")
    axes.set_ylabel("mean reward")
    axes.set_title(f"Cost vs quality ({report['split']}, n={report['n_prompts']})")
    legend = legend_beside(figure, axes, fontsize=7)
    workers = report["curves"]["workers"]["points"]
    labels = plain_labels([p["label"] for p in workers])
    label_points(
        figure,
        axes,
        [
            (p["mean_cost"], p["mean_reward"], label)
            for p, label in zip(workers, labels, strict=True)
        ],
        legend,
        stars=[(oracle["mean_cost"], oracle["mean_reward"])],
    )
    return figure


_CURVE_COLORS = {
    "router": "tab:blue",
    "knn": "tab:orange",
    "ridge": "tab:purple",
    "workers": "gray",
}


def _draw_curves(axes: Axes, report: dict) -> None:
    """Each curve's hull (dotted on to the highest cost of any curve) and its points."""
    cost_max = report["cost_range"][1]
    for name, curve in report["curves"].items():
        color = _CURVE_COLORS.get(name, "black")
        hull = np.array(curve["hull"])
        axes.plot(
            hull[:, 0],
            hull[:, 1],
            color=color,
            label=plain_text(f"{curve['label']}, AIQ {curve['aiq']:.3f}"),
        )
        axes.plot([hull[-1, 0], cost_max], [hull[-1, 1]] * 2, color=color, linestyle=":")
        points = np.array([[p["mean_cost"], p["mean_reward"]] for p in curve["points"]])
        axes.scatter(points[:, 0], points[:, 1], color=color, s=18, zorder=3)


def _draw_target(axes: Axes, report: dict) -> None:
    """The quality target's line, when the report has one."""
    if report["target_reward"] is None:
        return
    axes.axhline(
        report["target_reward"],
        color="tab:red",
        linestyle="--",
        linewidth=0.8,
        label=plain_text(
            f"{report['quality_fraction']:g} x best single ({report['best_single']['worker']})"
        ),
    )


# Where a point's label may go: offsets (points) at these distances, in these directions
# (the nearest free one wins; beyond the first distance a thin line leads to the point).
_LABEL_DISTANCES = (4.0, 10.0, 18.0, 28.0, 40.0, 55.0, 75.0, 100.0, 130.0, 170.0)
_LABEL_ANGLES = tuple(np.radians(np.arange(45.0, 405.0, 22.5)))
_LABEL_FONT_SIZE = 6
_LABEL_GAP_PX = 1.0
_MARKER_HALF_PX = 3.0
_STAR_HALF_POINTS = 6.0  # the oracle's marker (s=120)


def label_points(
    figure: Figure,
    axes: Axes,
    points: Sequence[tuple[float, float, str]],
    legend: Legend,
    stars: Sequence[tuple[float, float]] = (),
) -> None:
    """Label each (x, y, text) point where its label overlaps no other label, no other point
    (nor the big `stars` markers), the legend nor the axes' edge: close workers' labels would
    otherwise print over each other. Placed once the figure's layout is settled (the labels
    do not move it)."""
    renderer = FigureCanvasAgg(figure).get_renderer()
    figure.draw_without_rendering()
    bounds = axes.get_window_extent(renderer)
    anchors = [axes.transData.transform((x, y)) for x, y, _ in points]
    markers = [_box(x, y, _MARKER_HALF_PX, _MARKER_HALF_PX).extents for x, y in anchors]
    taken = [
        box.extents
        for box in (legend.get_window_extent(renderer), *_star_boxes(figure, axes, stars))
    ]
    for index, ((x, y, text), anchor) in enumerate(zip(points, anchors, strict=True)):
        size = _text_size(figure, renderer, text)
        others = np.array([*taken, *markers[:index], *markers[index + 1 :]]).reshape(-1, 4)
        dx, dy, box = _label_spot(anchor, size, others, bounds, figure.dpi / 72.0)
        _annotate(axes, text, (x, y), (dx, dy))
        taken.append(box.extents)


def _star_boxes(figure: Figure, axes: Axes, stars: Sequence[tuple[float, float]]) -> list[Bbox]:
    """The display boxes of the big star markers at `stars` (data coordinates)."""
    star_half = _STAR_HALF_POINTS * figure.dpi / 72.0
    return [
        _box(star_x, star_y, star_half, star_half)
        for star_x, star_y in (axes.transData.transform(star) for star in stars)
    ]


def _text_size(figure: Figure, renderer: RendererAgg, text: str) -> Bbox:
    """The display box `text` takes at the labels' font size."""
    probe = figure.text(0, 0, text, fontsize=_LABEL_FONT_SIZE)
    size = probe.get_window_extent(renderer)
    probe.remove()
    return size


def _annotate(
    axes: Axes, text: str, point: tuple[float, float], offset: tuple[float, float]
) -> None:
    """The label at `offset` (points) from `point`, a thin leader line to it when not next to
    it; left out of the layout (placed once it is settled)."""
    dx, dy = offset
    leader = {"arrowstyle": "-", "color": "gray", "linewidth": 0.4, "shrinkA": 0, "shrinkB": 2}
    annotation = axes.annotate(
        text,
        point,
        xytext=(dx, dy),
        textcoords="offset points",
        fontsize=_LABEL_FONT_SIZE,
        ha=_alignment(dx, ("right", "center", "left")),
        va=_alignment(dy, ("top", "center", "bottom")),
        arrowprops=leader if np.hypot(dx, dy) > _LABEL_DISTANCES[0] else None,
        annotation_clip=False,
        # the leader lines of other labels pass behind it, not through its letters
        bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none"},
        zorder=5,
    )
    annotation.set_in_layout(False)


def _label_spot(
    anchor: np.ndarray, size: Bbox, others: np.ndarray, bounds: Bbox, pixels_per_point: float
) -> tuple[float, float, Bbox]:
    """The nearest offset (points) from `anchor` (display pixels) where a label of `size`
    touches none of `others` (boxes' extents, one a row) and stays inside `bounds`; when there
    is none, the nearest of those that overlap least (overlaps equal but for float rounding
    are a tie). Returns the offset and the label's box. Every candidate's overlaps are
    computed at once: one by one, 100 workers took seconds."""
    candidates = []
    for distance, angle in _label_candidates():
        dx, dy = distance * float(np.cos(angle)), distance * float(np.sin(angle))
        x, y = anchor[0] + dx * pixels_per_point, anchor[1] + dy * pixels_per_point
        candidates.append((dx, dy, _label_box(x, y, dx, dy, size)))
    boxes = np.array([box.extents for _, _, box in candidates])
    overlaps = _overlaps(boxes, others)
    outside = _areas(boxes) - _overlaps(boxes, np.array([bounds.extents]))[:, 0]
    free = np.flatnonzero((overlaps == 0).all(axis=1) & (outside == 0))
    if free.size:
        return candidates[free[0]]
    # summed in the order of `others`, as one by one: the same sums, so the same choice
    clashes = np.array(
        [sum(row) + out for row, out in zip(overlaps.tolist(), outside.tolist(), strict=True)]
    )
    # an area computed from each spot's own corners is off in its last bits (504.0000000000007
    # for 504), so equal overlaps were told apart by rounding: a label went 75 points from its
    # point where the nearest spot overlapped as much
    least = np.flatnonzero(np.isclose(clashes, clashes.min(), rtol=1e-9, atol=1e-9))
    return candidates[least[0]]


def _label_candidates() -> list[tuple[float, float]]:
    return [(distance, angle) for distance in _LABEL_DISTANCES for angle in _LABEL_ANGLES]


def _alignment(offset: float, names: tuple[str, str, str]) -> str:
    """The side of the label that faces the point: its right edge when left of it, ..."""
    if offset < -0.5:
        return names[0]
    return names[1] if offset <= 0.5 else names[2]


def _label_box(x: float, y: float, dx: float, dy: float, size: Bbox) -> Bbox:
    """The label's box (display pixels, padded) with its facing side at (x, y)."""
    width, height = size.width, size.height
    left = {"right": x - width, "center": x - width / 2, "left": x}
    bottom = {"top": y - height, "center": y - height / 2, "bottom": y}
    x0 = left[_alignment(dx, ("right", "center", "left"))]
    y0 = bottom[_alignment(dy, ("top", "center", "bottom"))]
    return Bbox.from_extents(
        x0 - _LABEL_GAP_PX, y0 - _LABEL_GAP_PX, x0 + width + _LABEL_GAP_PX,
        y0 + height + _LABEL_GAP_PX,
    )  # fmt: skip


def _box(x: float, y: float, half_width: float, half_height: float) -> Bbox:
    return Bbox.from_extents(x - half_width, y - half_height, x + half_width, y + half_height)


def _overlaps(boxes: np.ndarray, others: np.ndarray) -> np.ndarray:
    """The area each of `boxes` shares with each of `others` (extents, one a row; 0 when
    apart or only touching), a row per box."""
    x0, y0, x1, y1 = (boxes[:, [column]] for column in range(4))
    width = np.minimum(x1, others[:, 2]) - np.maximum(x0, others[:, 0])
    height = np.minimum(y1, others[:, 3]) - np.maximum(y0, others[:, 1])
    return np.maximum(0.0, width) * np.maximum(0.0, height)


def _areas(boxes: np.ndarray) -> np.ndarray:
    return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
