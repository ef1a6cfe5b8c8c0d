"""The in-process tier's bulk load: a batch of hydration tuples whose keys are all new to the
tier becomes records, index entries and heap items in column-wide passes.

An open loads every live durable row (a million of them on a big bot) into an empty tier. Done
one row at a time through ``RecordBook._insert`` and ``RecordBook._reschedule``, each row paid
a dozen Python calls; here the columns of a batch are walked by C-level passes (``zip``,
``map``, ``dict.update``), and Python runs once per row only where a row needs a decision
(its owner's and its channel's index slot). The result is what those two methods build,
record by record: keep this module in step with them (tests/test_hydration_tuples.py compares
every attribute of two tiers loaded both ways).
"""

from __future__ import annotations

import sys
from collections import defaultdict, deque
from collections.abc import Sequence
from itertools import repeat
from operator import itemgetter, setitem
from typing import Any

from ..model import ScopeMeta
from .inprocess_records import NO_CATEGORIES, HeapItem, KeyTuple, Owner, Record, RecordBook, _size

__all__ = ["hydration_keys", "insert_new"]

_owner = itemgetter(0, 1)


def hydration_keys(columns: Sequence[Sequence[Any]]) -> list[KeyTuple]:
    """The key tuples of a batch given as columns. Kinds, owners and personas repeat across
    many rows, and the cursor hands each row fresh copies: interned, they are stored once."""
    intern = sys.intern
    personas = [p if p is None else intern(p) for p in columns[3]]
    return list(
        zip(map(intern, columns[0]), map(intern, columns[1]), columns[2], personas, strict=True)
    )


def insert_new(
    book: RecordBook,
    kts: list[KeyTuple],
    columns: Sequence[Sequence[Any]],
    metas: dict[tuple[Any, ...], ScopeMeta],
    now: float,
) -> None:
    """Add one record per row for keys the tier does not hold (distinct, in the rows' order,
    as ``_insert`` then ``_reschedule`` would) and push their deadlines on the heap.
    ``metas`` shares one ScopeMeta per distinct value (a channel's scopes carry the same)."""
    get = metas.get

    def new_meta(parts: tuple[Any, ...]) -> ScopeMeta:
        meta = metas[parts] = ScopeMeta(
            parts[0], parts[1], parts[2], parts[3], bool(parts[4]), parts[5]
        )
        return meta

    shared = [get(parts) or new_meta(parts) for parts in zip(*columns[4:10], strict=True)]
    categories = columns[12]
    with_categories = any(categories)
    recs = list(
        map(
            Record,
            kts,
            shared,
            columns[10],
            columns[11],
            [c or NO_CATEGORIES for c in categories] if with_categories else repeat(NO_CATEGORIES),
            columns[13],
            columns[14],
            columns[15],
            repeat(now),
        )
    )
    # Each record's size and deadline, as _size and _reschedule's rule give them. A hydrated
    # record holds no messages, so without categories its size is the record's and its
    # summary's, and its deadline its summary's (or the counter's, after ``touched_at``).
    if with_categories:
        sizes = list(map(_size, recs))
        expiries = [_expiry(book, rec) for rec in recs]
    else:
        size = _size(Record(("", "", "", None), ScopeMeta()))
        sizes = [size + len(s) if s else size for s in columns[10]]
        ttl, untouched = book.summary_ttl_s, now + book.crude_ttl_s
        expiries = [
            at + ttl if s is not None and at is not None else untouched
            for s, at in zip(columns[10], columns[11], strict=True)
        ]
    for rec, size, expires in zip(recs, sizes, expiries, strict=True):
        rec.size = size
        rec.expires_at = expires
    book._entries.update(zip(kts, recs, strict=True))
    book._bytes += sum(sizes)
    _index_owners(book._by_owner, kts, recs)
    _index_channels(book._by_channel, columns[2], kts)
    pending: list[HeapItem] = list(zip(expiries, book._seq, kts, strict=False))  # _seq: endless
    book._push(pending)


def _expiry(book: RecordBook, rec: Record) -> float:
    """Where ``_reschedule`` puts a new record on the heap: its latest deadline, or
    ``crude_ttl_s`` after it was touched when it holds nothing live."""
    expires = max(book._deadlines(rec))
    return expires if expires != -float("inf") else rec.touched_at + book.crude_ttl_s


def _index_owners(
    by_owner: dict[Owner, dict[KeyTuple, Record]], kts: list[KeyTuple], recs: list[Record]
) -> None:
    """Each record in its owner's dict, in the rows' order: grouped by C-level calls first
    (an owner tuple per row, one dict store per row), then one step per owner."""
    groups: defaultdict[Owner, dict[KeyTuple, Record]] = defaultdict(dict)
    deque(map(setitem, map(groups.__getitem__, map(_owner, kts)), kts, recs), 0)
    for owner, group in groups.items():
        held = by_owner.get(owner)
        if held is None:
            by_owner[owner] = group
        else:
            held.update(group)


def _index_channels(
    by_channel: dict[str, KeyTuple | set[KeyTuple]],
    channels: Sequence[str],
    kts: list[KeyTuple],
) -> None:
    """A channel with one scope maps to its bare key tuple, more to a set (as ``_insert``)."""
    fresh = dict(zip(channels, kts, strict=True))
    if len(fresh) == len(kts) and by_channel.keys().isdisjoint(fresh):
        by_channel.update(fresh)  # every channel new and once in the batch: the usual open
        return
    for kt in kts:
        channel = kt[2]
        keys = by_channel.get(channel)
        if keys is None:
            by_channel[channel] = kt
        elif type(keys) is tuple:
            if keys != kt:
                by_channel[channel] = {keys, kt}
        else:
            keys.add(kt)  # type: ignore[union-attr]
