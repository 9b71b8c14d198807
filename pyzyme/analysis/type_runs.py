"""Finished runs of type analysis, kept in a memo its caller shares between analyses, for
later runs of the same function to start from (:mod:`pyzyme.analysis.type_analysis`).

The analysis is monotone: trees only grow, and a merge that conflicts under some seeds
conflicts under larger ones too. So the fixed point of seeds and a return tree below another
run's (each of their trees contained in the other's) is a start from which visiting what the
larger seeds change reaches that run's fixed point: a function called from several places,
each knowing more of its arguments (the reverse of a parallel loop's body, tens of thousands
of instructions, analysed for its launch, the launch's caller and itself), is not analysed
from nothing each time. Not kept: a run that skipped a recursive call (its callee's key was
under way), or whose stores of pointers merged by meet.

Examples
--------
>>> from pyzyme.analysis.typetree import TypeTree, POINTER, FLOAT64
>>> memo, doubles = {}, TypeTree({(-1,): POINTER, (-1, -1): FLOAT64})
>>> record_finished(memo, "f", {0: TypeTree({(-1,): POINTER})}, None, "results", set())
>>> finished_below(memo, "f", {0: doubles}, None).results
'results'
>>> finished_below(memo, "f", {}, None) is None       # says less: start from nothing
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyzyme.analysis.typetree import TypeTree
from pyzyme.errors import TypeAnalysisError

__all__ = ["Finished", "finished_below", "record_finished", "within", "PARTIAL"]

# The memo's keys besides callees': (FINISHED, function) -> its runs to start from, and
# PARTIAL -> the callee keys whose runs skipped a recursive call.
FINISHED, PARTIAL = "finished", "partial"
#: The runs of one function a memo keeps to start from.
KEPT = 4


@dataclass(frozen=True)
class Finished:
    """One run: its seeds and return tree, its results (a ``TypeResults``), and the phis
    and selects that merged by meet in it."""

    seeds: dict
    return_tree: TypeTree | None
    results: object
    meet_merges: frozenset


def finished_below(memo: dict, fn, seeds: Mapping[int, TypeTree | None],
                   return_tree: TypeTree | None) -> Finished | None:
    """The latest run of ``fn`` in ``memo`` whose seeds and return tree are below these."""
    for done in reversed(memo.get((FINISHED, fn), ())):
        if all(within(t, seeds.get(i)) for i, t in done.seeds.items()) \
                and within(done.return_tree, return_tree):
            return done
    return None


def record_finished(memo: dict, fn, seeds: Mapping[int, TypeTree | None],
                    return_tree: TypeTree | None, results, merges: set) -> None:
    """Keep a run of ``fn`` (its last :data:`KEPT`) for later runs to start from."""
    kept = memo.setdefault((FINISHED, fn), [])
    kept.append(Finished({i: t.copy() for i, t in seeds.items() if t is not None},
                         None if return_tree is None else return_tree.copy(), results,
                         frozenset(merges)))
    del kept[:-KEPT]


def within(small: TypeTree | None, large: TypeTree | None) -> bool:
    """Whether ``large`` says everything ``small`` says (None: nothing)."""
    if small is None or not small:
        return True
    if large is None:
        return False
    try:
        return not large.copy().merge(small)
    except TypeAnalysisError:
        return False
