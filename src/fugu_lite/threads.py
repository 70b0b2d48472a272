"""The thread pools of the native numeric libraries (OpenBLAS, OpenMP, torch's intra-op
pool) during the fits on cached features: the reward head's k-means, logistic regressions
and ridge, the kNN and ridge baselines of `eval`, and the SFT, RL and ES heads.

Those fits are thousands of small BLAS calls (a logistic regression on ~4,000 x 384
features, kNN similarity blocks), too small for a second thread to pay. With one thread
per core, each call waits for all of them, so when another process holds one core the
others spin until it is scheduled: on 2 cores with one of them busy, `train reward-head`'s
logistic regressions ran ~13x slower than in one thread (bench/threads.py), and SFT on
LLMRouter's cached features ~15x slower in two torch threads than in one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from threadpoolctl import threadpool_limits

from .text import notes_console

# BLAS/OpenMP threads inside `fit_threads()`; None leaves the pools as they are (what
# bench/threads.py measures as "before").
FIT_THREADS: int | None = 1
# When one of these is set, the pools were sized on purpose: they are left as set.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


console = notes_console()
_SAID_IGNORED: set[tuple[str, str]] = set()  # (variable, value) said to size nothing, once


def pools_sized_by_user() -> bool:
    """Whether one of THREAD_VARIABLES holds a thread count (OPENBLAS_NUM_THREADS: as its
    first, READS_FIRST_COUNT). One that holds none (empty, `abc`, `0`) sizes nothing, since
    the libraries ignore it and keep a thread per core (libgomp says only "Invalid value"):
    it is said, once, and the fits keep their limit."""
    sized = False
    for name in THREAD_VARIABLES:
        value = os.environ.get(name)
        if value is None:
            continue
        largest = LARGEST_THREAD_COUNT.get(name, MAX_THREAD_COUNT)
        read = value.partition(",")[0] if name in READS_FIRST_COUNT else value
        if is_thread_count(read, largest):
            sized = True
        else:
            _say_ignored(name, value, largest)
    return sized


# libgomp reads a count with strtoul and refuses one that is no positive long ("Invalid
# value" for 2**63 and past it, as for an overflow of strtoul)
MAX_THREAD_COUNT = 2**63 - 1
# OpenBLAS reads its count with atoi into a C int, which wraps past 2**31 - 1: 2**31 is read
# as a negative count (a thread per core), 2**32 + 1 as 1 thread
LARGEST_THREAD_COUNT = {"OPENBLAS_NUM_THREADS": 2**31 - 1}
# atoi stops at a comma: of OpenMP's `2,x` (a count per nesting level) OpenBLAS runs 2 threads
READS_FIRST_COUNT = frozenset({"OPENBLAS_NUM_THREADS"})


def is_thread_count(value: str, largest: int = MAX_THREAD_COUNT) -> bool:
    """A whole number of threads, 1 to `largest` (OpenMP's `4,2`, one per nesting level, too:
    each a count, as libgomp refuses `2,0` whole)."""
    # a leading '+' too: libgomp's strtoul and OpenBLAS's atoi read `+2` as 2
    counts = [count.strip().removeprefix("+") for count in value.split(",")]
    # isdecimal, not isdigit: int() refuses the digits isdigit also takes ('²'); and ASCII
    # only: int() reads a fullwidth '４', which the libraries' C parsers refuse
    return all(
        count.isascii() and count.isdecimal() and 0 < int(count) <= largest for count in counts
    )


def _say_ignored(name: str, value: str, largest: int) -> None:
    if (name, value) in _SAID_IGNORED:
        return
    _SAID_IGNORED.add((name, value))
    console.print(
        f"{name}={value!r} is not a number of threads (a whole number, 1 or more and below "
        f"2**{largest.bit_length()}), so the numeric libraries ignore or misread it; fugu-lite "
        "sizes its fits' threads as if it were unset. "
        f"Set it to a number of threads (e.g. {name}=1), or unset it.",
        markup=False,
        style="yellow",
    )


@contextmanager
def fit_threads() -> Iterator[None]:
    """Run the block with at most FIT_THREADS BLAS and OpenMP threads, as they were after,
    unless one of THREAD_VARIABLES is set."""
    if FIT_THREADS is None or pools_sized_by_user():
        yield
        return
    with threadpool_limits(limits=FIT_THREADS):
        yield


@contextmanager
def torch_fit_threads(runs_backbone: bool) -> Iterator[None]:
    """Train a head on cached features in FIT_THREADS torch threads, as many as before after.
    A stage whose steps run the backbone (SVF) is left alone (its matmuls are far larger:
    one thread was 30% slower on free cores, bench/threads.py svf_step), and so is a process
    whose THREAD_VARIABLES are set."""
    if runs_backbone or FIT_THREADS is None or pools_sized_by_user():
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(FIT_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
