"""The in-process tier's bookkeeping: its records, their indexes, sizes and TTL heap.

The dict, the heap and the indexes must change together, so :class:`RecordBook` owns all of
them and every change goes through its few methods: :meth:`~RecordBook._insert` adds a
record to every index, :meth:`~RecordBook._remove` takes it out of every index (expiry,
eviction, invalidation alike), so no index can keep a key the dict has dropped. One rule
(:meth:`~RecordBook._deadlines`) says when each value of a record stops being live; the
views, the heap and the sweep all follow it. Records are mutable and private; readers get
frozen :class:`Entry` views, built once and reused until the record changes or a value in
it expires.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from collections.abc import Mapping
from operator import attrgetter
from types import MappingProxyType

from ..model import Entry, Message, ScopeKey, ScopeMeta
from .inprocess_recent import OwnerOrder, score

__all__ = [
    "NO_CATEGORIES",
    "OWNER_SLACK",
    "HeapItem",
    "KeyTuple",
    "Owner",
    "Record",
    "RecordBook",
    "channel_keys",
]

KeyTuple = tuple[str, str, str, str | None]
Owner = tuple[str, str]
HeapItem = tuple[float, int, KeyTuple]

# Rough resident cost in bytes of a record and of one message beside its text; only the
# relative size matters for the byte ceiling, and these track CPython within ~20%. Measured
# (bench.core.measure_memory, 10 messages of 300 characters): 5558 bytes an entry against
# 5590 estimated; a hydrated record with a 980-character summary: 1800 against 1680.
_RECORD_BYTES = 700
_MESSAGE_BYTES = 190
_CATEGORY_BYTES = 100
_INF = float("inf")
_AUTHOR_LIST_MAX = 1024  # records an author's index list may stand for before it is a set
# Owners tracked for completeness, beyond one per cached entry: enough for a burst of new
# users, without letting a flood of distinct owners grow memory past the tier's ceilings.
OWNER_SLACK = 1024
_author = attrgetter("author_id")
_content = attrgetter("content")
NO_CATEGORIES: Mapping[str, str] = MappingProxyType({})


class Record:
    """One cached scope. Mutable and private: readers only ever see :class:`Entry` views."""

    __slots__ = (
        "_key",
        "categories",
        "categories_at",
        "expires_at",
        "listed",
        "messages",
        "messages_at",
        "meta",
        "order",
        "revision",
        "rscore",
        "size",
        "summary",
        "summary_at",
        "touched_at",
        "turns",
        "view",
        "view_until",
    )

    def __init__(
        self,
        key: ScopeKey | KeyTuple,
        meta: ScopeMeta,
        summary: str | None = None,
        summary_at: float | None = None,
        categories: Mapping[str, str] = NO_CATEGORIES,
        categories_at: float | None = None,
        turns: int = 0,
        revision: int = 0,
        touched_at: float = 0.0,
    ) -> None:
        # Hydration passes the plain key tuple: the ScopeKey is built on the first view.
        self._key = key
        self.meta = meta
        self.messages: tuple[Message, ...] = ()
        self.messages_at: float | None = None
        self.summary = summary
        self.summary_at = summary_at
        self.categories = categories
        self.categories_at = categories_at
        self.turns = turns
        self.revision = revision
        self.touched_at = touched_at
        self.expires_at = -_INF  # not scheduled yet: the first _reschedule always pushes
        self.size = 0  # not counted yet: _insert counts it
        self.view: Entry | None = None
        self.view_until = 0.0
        # Its place in the owner's recall order (inprocess_recent), set when it is inserted.
        self.rscore = -_INF
        self.order = 0
        self.listed = False

    @property
    def key(self) -> ScopeKey:
        key = self._key
        if isinstance(key, ScopeKey):
            return key
        key = self._key = ScopeKey._unchecked(*key)  # type: ignore[arg-type]
        return key


def _size(rec: Record, message_chars: int | None = None) -> int:
    """The record's estimated resident bytes (see ``_RECORD_BYTES``); ``message_chars``, the
    length of its messages' texts, when the caller already has it."""
    messages = rec.messages
    size = _RECORD_BYTES
    if messages:
        if message_chars is None:
            message_chars = sum(map(len, map(_content, messages)))
        size += _MESSAGE_BYTES * len(messages) + message_chars
    if rec.summary:
        size += len(rec.summary)
    if rec.categories:
        for slug, text in rec.categories.items():
            size += len(slug) + len(text) + _CATEGORY_BYTES
    return size


class RecordBook:
    """The records of the in-process tier, in LRU order, with every index over them."""

    def __init__(
        self, *, crude_ttl_s: float, summary_ttl_s: float, max_entries: int, max_bytes: int
    ) -> None:
        self.crude_ttl_s = crude_ttl_s
        self.summary_ttl_s = summary_ttl_s
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[KeyTuple, Record] = OrderedDict()
        # Owner → its records (not just keys): the read path walks an owner's records on every
        # turn, and a key lookup per record would hash each key tuple again.
        self._by_owner: dict[Owner, dict[KeyTuple, Record]] = {}
        # A channel with one scope maps to its bare key tuple: a set of one costs ~200 bytes.
        self._by_channel: dict[str, KeyTuple | set[KeyTuple]] = {}
        # Author -> the keys of the records holding their messages, as a list that may also
        # hold stale keys (a record dropped, or an author no longer in it): a list slot is 8
        # bytes where a set's is ~50, and ten authors per entry made the sets the biggest
        # index. Complete all the same: every live record holding an author's message is in
        # that author's list. Stale keys are dropped when a list outgrows twice its live
        # count (kept per author) plus 8, and an author's list goes when the count is zero.
        # An author in more than _AUTHOR_LIST_MAX records (a bot's own id, say) gets an exact
        # set instead, so no compaction ever scans more than a few thousand records at once.
        self._by_author: dict[str, list[KeyTuple] | set[KeyTuple]] = {}
        self._author_live: dict[str, int] = {}
        self._heap: list[HeapItem] = []
        self._seq = itertools.count()
        self._incomplete: set[Owner] = set()
        self._complete = False  # a miss needs no durable read
        self._owners_ok = False  # owners not in _incomplete are complete
        # Otherwise only the owners re-read since are, least recently marked dropped first.
        self._complete_owners: OrderedDict[Owner, None] = OrderedDict()
        self._bytes = 0
        # Each owner's records in recall order (inprocess_recent), once the owner was read.
        self._orders: dict[Owner, OwnerOrder] = {}
        self._order_seq = itertools.count(0, -1)
        self._counts = dict.fromkeys(
            ("hits", "misses", "stores", "evictions", "expirations", "invalidations", "fenced"),
            0,
        )

    # -- the expiry rule ------------------------------------------------------------------

    def _deadlines(self, rec: Record) -> tuple[float, float, float]:
        """When the record's messages, summary and categories stop being live: each is live
        before its deadline; a value it does not hold has ``-inf``. Messages live
        ``crude_ttl_s`` after the last capture, summary and categories ``summary_ttl_s``
        after they were written."""
        messages = summary = categories = -_INF
        if rec.messages and rec.messages_at is not None:
            messages = rec.messages_at + self.crude_ttl_s
        if rec.summary is not None and rec.summary_at is not None:
            summary = rec.summary_at + self.summary_ttl_s
        if rec.categories and rec.categories_at is not None:
            categories = rec.categories_at + self.summary_ttl_s
        return messages, summary, categories

    def _view(self, rec: Record, now: float) -> Entry | None:
        if rec.view is not None and now < rec.view_until:
            return rec.view
        messages_until, summary_until, categories_until = self._deadlines(rec)
        until = _INF
        messages: tuple[Message, ...] = ()
        if now < messages_until:
            messages, until = rec.messages, messages_until
        summary = None
        if now < summary_until:
            summary, until = rec.summary, min(until, summary_until)
        categories: Mapping[str, str] = {}
        if now < categories_until:
            categories, until = rec.categories, min(until, categories_until)
        if not messages and summary is None and not categories:
            return None
        rec.view = Entry._unchecked(
            rec.key,
            messages,
            summary,
            categories,
            rec.turns,
            rec.messages_at if messages else None,
            rec.summary_at if summary is not None else None,
            rec.categories_at if categories else None,
            rec.meta,
        )
        rec.view_until = until
        return rec.view

    def _reschedule(self, kt: KeyTuple, rec: Record, pending: list[HeapItem] | None = None) -> None:
        """Put the record on the heap at its latest deadline (a record with no live value
        still mirrors the durable counter for ``crude_ttl_s`` after it was touched). With
        ``pending``, the item goes there for the caller to push with a whole batch."""
        expires, summary, categories = self._deadlines(rec)
        if summary > expires:
            expires = summary
        if categories > expires:
            expires = categories
        if expires == -_INF:
            expires = rec.touched_at + self.crude_ttl_s
        if expires != rec.expires_at:
            rec.expires_at = expires
            item = (expires, next(self._seq), kt)
            if pending is not None:
                pending.append(item)
                return
            heapq.heappush(self._heap, item)
            if len(self._heap) > 2 * len(self._entries) + 1024:
                self._compact_heap()

    def _compact_heap(self) -> None:
        # Lazy deletion leaves stale items behind; rebuild from the live records only.
        self._heap = [(r.expires_at, next(self._seq), kt) for kt, r in self._entries.items()]
        heapq.heapify(self._heap)

    def _push(self, pending: list[HeapItem]) -> None:
        heap = self._heap
        if len(pending) > len(heap):  # a first, big batch: one O(n) heapify beats n pushes
            heap.extend(pending)
            heapq.heapify(heap)
        else:
            for item in pending:
                heapq.heappush(heap, item)

    # -- adding and removing records ------------------------------------------------------

    def _insert(self, kt: KeyTuple, rec: Record) -> None:
        """Add a new record to the dict and the owner and channel indexes (its messages are
        indexed by :meth:`_set_messages`), and count its size."""
        self._entries[kt] = rec
        owner = (kt[0], kt[1])
        held = self._by_owner.get(owner)
        if held is None:
            self._by_owner[owner] = {kt: rec}
        else:
            held[kt] = rec
        by_channel, channel = self._by_channel, kt[2]
        keys = by_channel.get(channel)
        if keys is None:
            by_channel[channel] = kt  # most channels hold one scope
        elif type(keys) is tuple:
            if keys != kt:
                by_channel[channel] = {keys, kt}
        else:
            keys.add(kt)  # type: ignore[union-attr]
        size = rec.size = _size(rec)
        self._bytes += size
        order = self._orders.get(owner)
        if order is not None:  # else built at the owner's next read (inprocess_recent)
            order.known += 1
            rec.order = next(self._order_seq)
            new = score(rec)
            if new != -_INF:
                rec.rscore = new
                order.add(rec)

    def _place(self, kt: KeyTuple, rec: Record) -> None:
        """Move a record to where its values put it in its owner's recall order: after
        every change of its messages, summary or categories."""
        owner = (kt[0], kt[1])
        order = self._orders.get(owner)
        if order is None:
            return
        if order.known != len(self._by_owner[owner]):
            # A bulk load added records behind its back: built again at the next read.
            del self._orders[owner]
            return
        new = score(rec)
        if rec.listed:
            if new != rec.rscore:
                order.move(rec, new)
        elif new != -_INF:
            rec.rscore = new
            order.add(rec)

    def _recall_order(self, owner: Owner) -> OwnerOrder | None:
        """The owner's records in recall order (``None``: it has none), built now when it
        was never read or a bulk load added records since."""
        held = self._by_owner.get(owner)
        if not held:
            return None
        order = self._orders.get(owner)
        if order is None or order.known != len(held):
            order = self._orders[owner] = OwnerOrder.build(held.values(), self._order_seq)
        return order

    def _remove(self, kt: KeyTuple, reason: str) -> None:
        rec = self._entries.pop(kt)
        owner = (kt[0], kt[1])
        held = self._by_owner.get(owner)
        if held is not None:
            held.pop(kt, None)
            if not held:
                del self._by_owner[owner]
        _discard_channel(self._by_channel, kt[2], kt)
        order = self._orders.get(owner)
        if order is not None:
            order.known -= 1
            if rec.listed:
                order.drop(rec)
            if not order.known:
                del self._orders[owner]
        if rec.messages:
            for author in set(map(_author, rec.messages)):
                if author is not None:
                    self._unindex_author(author, kt)
        self._bytes -= rec.size
        self._counts[reason] += 1
        if reason == "evictions":
            self._complete = False
            if not self._owners_ok:
                self._complete_owners.pop(owner, None)
            elif len(self._incomplete) < len(self._entries) + OWNER_SLACK:
                self._incomplete.add(owner)
            else:
                # Remembering every evicted owner would grow without bound under a flood of
                # distinct owners; forget them all and trust only owners re-read from now on.
                self._owners_ok = False
                self._incomplete.clear()

    def _enforce_bounds(self, keep: KeyTuple) -> None:
        entries = self._entries
        while len(entries) > self.max_entries or self._bytes > self.max_bytes:
            oldest = next(iter(entries))
            if oldest == keep:
                if len(entries) == 1:
                    return
                entries.move_to_end(keep)
                continue
            self._remove(oldest, "evictions")

    # -- changing a record ----------------------------------------------------------------

    def _resize(self, rec: Record) -> None:
        size = _size(rec)
        self._bytes += size - rec.size
        rec.size = size

    def _set_messages(self, kt: KeyTuple, rec: Record, messages: tuple[Message, ...]) -> None:
        """Replace the record's messages, keeping the author index and its size in step."""
        old = rec.messages
        rec.messages = messages  # first: a compaction below checks the record's new messages
        # The authors are recomputed from the messages rather than kept beside them: a set
        # per record would cost more memory than the index it serves. C-speed passes (this
        # runs on every capture): the authors, then the texts' length.
        authors = set(map(_author, messages))
        if not old:
            self._index_authors(authors, kt)
        elif old is not messages:
            previous = set(map(_author, old))
            if authors != previous:
                for a in previous - authors:
                    if a is not None:
                        self._unindex_author(a, kt)
                self._index_authors(authors - previous, kt)
        size = _size(rec, sum(map(len, map(_content, messages))))
        self._bytes += size - rec.size
        rec.size = size

    def _index_authors(self, authors: set[str | None], kt: KeyTuple) -> None:
        """:meth:`_index_author` for each of ``authors`` (``None``: no author), with its
        usual case inline: a short list that only grows."""
        live_counts, index = self._author_live, self._by_author
        for author in authors:
            if author is None:
                continue
            live = live_counts.get(author, 0) + 1
            keys = index.get(author)
            if type(keys) is list and len(keys) < 2 * live + 8 and live <= _AUTHOR_LIST_MAX:
                live_counts[author] = live
                keys.append(kt)
            else:
                self._index_author(author, kt)

    def _index_author(self, author: str, kt: KeyTuple) -> None:
        live = self._author_live[author] = self._author_live.get(author, 0) + 1
        keys = self._by_author.get(author)
        if keys is None:
            self._by_author[author] = [kt]
        elif type(keys) is set:
            keys.add(kt)
        else:
            keys.append(kt)  # type: ignore[union-attr]
            if len(keys) > 2 * live + 8 or live > _AUTHOR_LIST_MAX:
                # Amortized: at least `live` stale keys were added since the last compaction;
                # and a list is never longer than 2 * _AUTHOR_LIST_MAX + 9 to scan.
                fresh = self._holding(author, keys)
                if live > _AUTHOR_LIST_MAX:
                    self._by_author[author] = set(fresh)
                else:
                    keys[:] = fresh  # type: ignore[index]

    def _holding(self, author: str, keys: list[KeyTuple] | set[KeyTuple]) -> list[KeyTuple]:
        """The keys, once each, of the live records that hold a message of ``author``."""
        entries = self._entries
        return [
            k
            for k in dict.fromkeys(keys)
            if (r := entries.get(k)) is not None and author in map(_author, r.messages)
        ]

    def _unindex_author(self, author: str, kt: KeyTuple) -> None:
        live = self._author_live[author] - 1
        if not live:
            del self._author_live[author]
            del self._by_author[author]  # every key left in it is stale
            return
        self._author_live[author] = live
        keys = self._by_author[author]
        if type(keys) is set:
            keys.discard(kt)
        elif len(keys) > 2 * live + 8:  # a list keeps stale keys until it outgrows this
            keys[:] = self._holding(author, keys)  # type: ignore[index]

    def _clear(self) -> None:
        self._entries.clear()
        self._by_owner.clear()
        self._by_channel.clear()
        self._by_author.clear()
        self._author_live.clear()
        self._orders.clear()
        self._heap.clear()
        self._incomplete.clear()
        self._complete_owners.clear()
        self._bytes = 0


def _discard_channel(
    index: dict[str, KeyTuple | set[KeyTuple]], channel: str, kt: KeyTuple
) -> None:
    keys = index.get(channel)
    if keys is None:
        return
    if type(keys) is tuple:
        if keys == kt:
            del index[channel]
        return
    keys.discard(kt)  # type: ignore[union-attr]
    if len(keys) == 1:
        index[channel] = next(iter(keys))
    elif not keys:
        del index[channel]


def channel_keys(index: dict[str, KeyTuple | set[KeyTuple]], channel: str) -> list[KeyTuple]:
    """The keys the channel index holds for ``channel``."""
    keys = index.get(channel)
    if keys is None:
        return []
    return [keys] if type(keys) is tuple else list(keys)  # type: ignore[arg-type]
