"""Hulls of cost-quality operating points and the numbers read off them: AIQ and the cost
to reach a quality.

The hull of a set of points is the non-decreasing concave upper hull: sort by cost, keep
the points that raise the best reward so far (the Pareto front), then the upper concave
hull of those. Every point on a hull segment is reachable by sending each request to one
of the segment's two end points at random.

AIQ (RouterBench's average improvement in quality, arXiv 2403.12031), as implemented here:

    AIQ = 1 / (c_max - c_min) * integral from c_min to c_max of H(c) dc

where [c_min, c_max] spans every operating point of every compared curve (router, kNN,
ridge, single workers; not the oracle), and H is the curve's hull, linearly interpolated
between its vertices, extended flat (at its best reward) beyond its most expensive vertex
and at the floor below its cheapest vertex (a method earns no quality at costs it cannot
run at; RouterBench's code likewise integrates from each curve's first point). The floor
is 0, or the lowest reward of the evaluated split when rewards go below 0 (-1..1 scores):
a curve that cannot run cheaply must never gain from it. When every point costs the same,
AIQ is H at that cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import numpy as np

Hull = list[tuple[float, float]]


def non_decreasing_hull(points: Sequence[tuple[float, float]]) -> Hull:
    """Vertices (cost, reward) of the non-decreasing concave upper hull, cost ascending;
    both cost and reward strictly increase along it."""
    if not points:
        raise ValueError("a hull needs at least one point")
    frontier: Hull = []
    for cost, reward in sorted(points, key=lambda point: (point[0], -point[1])):
        if frontier and reward <= frontier[-1][1]:
            continue  # costs at least as much as a point already kept, earns no more
        frontier.append((float(cost), float(reward)))
    hull: Hull = []
    for point in frontier:
        while len(hull) >= 2 and _turn(hull[-2], hull[-1], point) >= 0:
            hull.pop()  # hull[-1] lies on or below the segment hull[-2] -> point
        hull.append(point)
    return hull


def _turn(a: tuple[float, float], b: tuple[float, float], c: tuple[float, float]) -> float:
    """> 0 when b lies below the line from a to c (for a, b, c in cost order)."""
    return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])


def hull_reward_at(hull: Hull, cost: float, floor: float = 0.0) -> float:
    """H(cost): interpolated on the hull, flat beyond its end, `floor` below its start."""
    costs, rewards = zip(*hull, strict=True)
    if cost < costs[0]:
        return floor
    return float(np.interp(cost, costs, rewards))


def aiq(hull: Hull, cost_min: float, cost_max: float, floor: float = 0.0) -> float:
    """The mean of H over [cost_min, cost_max] (see the module docstring); `floor` is H
    below the hull's cheapest point (`reward_floor`)."""
    if cost_max < cost_min:
        raise ValueError(f"cost range [{cost_min}, {cost_max}] is empty")
    if cost_max == cost_min:
        return hull_reward_at(hull, cost_max, floor)
    start = max(cost_min, hull[0][0])
    if start >= cost_max:
        return floor
    knots = sorted({start, cost_max, *(cost for cost, _ in hull if start < cost < cost_max)})
    values = [hull_reward_at(hull, knot, floor) for knot in knots]
    area = np.trapezoid(values, knots) + floor * (start - cost_min)
    return float(area / (cost_max - cost_min))


def reward_floor(rewards: np.ndarray) -> float:
    """H below a hull's cheapest point: 0, or the lowest reward when rewards go below 0,
    so that no curve gains from costs it cannot run at."""
    return min(0.0, float(rewards.min()))


def cost_to_reach(hull: Hull, target_reward: float) -> float | None:
    """The least cost at which the hull reaches target_reward (interpolated); None if never."""
    if hull[0][1] >= target_reward:
        return hull[0][0]
    for (left_cost, left_reward), (right_cost, right_reward) in pairwise(hull):
        if left_reward < target_reward <= right_reward:
            share = (target_reward - left_reward) / (right_reward - left_reward)
            return float(left_cost + share * (right_cost - left_cost))
    return None
