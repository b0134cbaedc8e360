"""Completed tasks of one stage, grouped by "the same input size" (policy 4, Algorithm 1).

Decisions (the paper only says "the same input data size"):

- Two sizes are the same when |a - b| <= tolerance * max(a, b)
  (``PredictionConfig.same_input_relative_tolerance``); tolerance 0 means equal.
- That relation is not transitive, so each group has a fixed *anchor*: the size
  that founded it. A size belongs to the nearest anchor it is the same as.
  Anchors never move, and no two anchors are the same as each other.
- A completion whose size matches an existing group joins it. Sizes new to the
  stage are clustered among themselves in ascending order: the smallest founds
  a group and the following sizes join it while they are the same as its
  anchor. This makes the grouping independent of the completion order within
  one interval.
- A group's representative size (its training point d_M) is its anchor; its
  time is the median execution time of its members.

Group ids are stable (creation order). A sorted copy of the anchors serves
np.searchsorted lookups, so finding the groups of k sizes costs O(k log G).
"""

from __future__ import annotations

import bisect

import numpy as np


class SizeGroups:
    """Input-size groups of one stage's completed tasks, with per-group median times."""

    def __init__(self, tolerance: float) -> None:
        self.tolerance = tolerance
        self.anchor = np.empty(0)  # by group id
        self.median = np.empty(0)  # by group id: median execution time of the members
        self._members: list[list[float]] = []  # by group id: execution times, sorted
        self._sorted_anchor = np.empty(0)
        self._sorted_gid = np.empty(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self._members)

    def find(self, sizes: np.ndarray) -> np.ndarray:
        """Group id of each size (the nearest anchor it is the same as), -1 if none."""
        sizes = np.asarray(sizes, dtype=np.float64)
        found = np.full(sizes.size, -1, dtype=np.int64)
        n = self._sorted_anchor.size
        if n == 0 or sizes.size == 0:
            return found
        pos = np.searchsorted(self._sorted_anchor, sizes)
        best = np.full(sizes.size, np.inf)
        # Only the anchors either side can be nearest; check both against the
        # tolerance because the farther, larger one may pass when the nearer fails.
        # The lower neighbour goes first and wins ties.
        for cand in (np.clip(pos - 1, 0, n - 1), np.clip(pos, 0, n - 1)):
            anchor = self._sorted_anchor[cand]
            diff = np.abs(sizes - anchor)
            ok = (diff <= self.tolerance * np.maximum(sizes, anchor)) & (diff < best)
            best[ok] = diff[ok]
            found[ok] = self._sorted_gid[cand[ok]]
        return found

    def add(self, sizes: np.ndarray, exec_s: np.ndarray) -> None:
        """Put completed tasks (input sizes, execution times) into their groups."""
        sizes = np.asarray(sizes, dtype=np.float64)
        gid = self.find(sizes)
        new = gid < 0
        if new.any():
            gid[new] = self._found_groups(sizes[new])
        # One insort per new completion: work proportional to what completed.
        for g, e in zip(gid.tolist(), np.asarray(exec_s, dtype=np.float64).tolist()):
            bisect.insort(self._members[g], e)
        touched = np.unique(gid)
        self.median[touched] = [median_of_sorted(self._members[g]) for g in touched.tolist()]

    def _found_groups(self, sizes: np.ndarray) -> np.ndarray:
        """Cluster sizes that match no existing group; return their new group ids."""
        uniq, inverse = np.unique(sizes, return_inverse=True)
        ids = np.empty(uniq.size, dtype=np.int64)
        first = len(self._members)
        anchors: list[float] = []
        for k, size in enumerate(uniq.tolist()):
            if not anchors or not self._same(size, anchors[-1]):
                anchors.append(size)
                self._members.append([])
            ids[k] = first + len(anchors) - 1
        new_anchor = np.array(anchors)
        self.anchor = np.concatenate([self.anchor, new_anchor])
        self.median = np.concatenate([self.median, np.full(new_anchor.size, np.nan)])
        at = np.searchsorted(self._sorted_anchor, new_anchor)
        self._sorted_anchor = np.insert(self._sorted_anchor, at, new_anchor)
        self._sorted_gid = np.insert(self._sorted_gid, at, np.arange(first, first + new_anchor.size))
        return ids[inverse.reshape(-1)]

    def _same(self, a: float, b: float) -> bool:
        return abs(a - b) <= self.tolerance * max(a, b)


def median_of_sorted(values: list[float] | np.ndarray) -> float:
    """Median of an already sorted sequence (mean of the two middle values when even, like np.median)."""
    n = len(values)
    return 0.5 * (float(values[(n - 1) // 2]) + float(values[n // 2]))
