"""Byte-level mutation of real files, the one strategy every reader fuzzer shares."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st


@st.composite
def mangled_bytes(draw: st.DrawFn, seeds: Sequence[bytes], junk: Sequence[bytes], random_junk_max: int = 20) -> bytes:
    """One of ``seeds`` with one to three flips, deletions, insertions (from ``junk`` or random bytes),
    duplications or a truncation: what a torn write, a bad disk or a hostile editor leaves."""
    data = bytearray(draw(st.sampled_from(seeds)))
    inserts = st.sampled_from(junk) | st.binary(min_size=1, max_size=random_junk_max)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["flip", "delete", "insert", "duplicate", "truncate"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[at] = draw(st.integers(0, 255))
        elif kind == "delete":
            del data[at : at + draw(st.integers(1, 200))]
        elif kind == "insert":
            data[at:at] = draw(inserts)
        elif kind == "duplicate":
            data[at:at] = data[at : at + draw(st.integers(1, 400))]
        else:
            del data[at:]
    return bytes(data)


def value_slots(doc: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) of a parsed document: the places a value can be replaced."""
    slots: list[tuple[Any, Any]] = []
    stack = [doc]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            slots.append((node, key))
            stack.append(value)
    return slots
