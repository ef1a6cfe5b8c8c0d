"""Where the Redis hot tier keeps what: key names, hash-tag groups, one slot per script.

Every key starts with the prefix ``P`` (so a scan by prefix finds them all) and carries a
hash tag, which Redis Cluster uses, alone, to choose the key's slot::

    P{g<k>}e:<key>               hash: one record (meta, mirrored durable values, messages, ...)
    P{g<k>}c:<channel>           set of the channel's keys
    P{g<k>}o:server:<owner>      sorted set of a server's keys in this group, each by the
                                 newest time its record holds (a turn's recall order)
    P{g<k>}o:u:<user target>     the same for a user, named by the user's digest
    P{g<k>}a:<user target>       set of this group's keys holding a message by that author
    P{g<k>}x                     sorted set of the group's keys, scored by expiry (``sweep``)
    P{g<k>}n, P{g<k>}b           the group's entry and byte totals
    P{g<k>}tb, th, tl            the group's copy of the forget fence
    P{g<k>}fm                    the group's mark: the journal position up to which every
                                 forget is applied here (``redis_repair``)
    P{g<k>}fo                    while a replay of lost forgets is under way: the mark it
                                 began from (a prune is checked against it)
    P{g<k>}sv                    the group's copy of the newest settings change
    P{g<k>}moving                never written: see :meth:`Layout.fixed_keys`
    P{o:<kind>:<owner>}          the owner directory: every key of the owner, in any group
    P{o:<kind>:<owner>}c         "this owner was re-read from the durable tier" marker
    P{g<k>}t:<id>, P{g<k>}ts     the sidecar's shared turns of the group's channels, and
                                 their index by expiry (the id ends with ``.<k>``)

A user's indexes are named by the digest the journal names them by (``user_target``), so a
forget can be replayed from the journal into a group that lost it.

A channel belongs to group ``k = crc32(channel) mod G`` (``G`` = the ``groups=`` URL option,
16 by default), so a scope's record, its channel index and the fence it is checked against
share one slot, and a turn's capture (user and server scope of one channel) stays one script.
Changing ``G`` moves channels to other groups: start it on an empty prefix.

``<key>`` is the compact JSON array ``[kind, owner, channel, persona]``.
"""

from __future__ import annotations

import zlib

from ...model import ScopeKey
from ...model.errors import ConfigError
from ...model.fence import user_target

__all__ = ["DEFAULT_GROUPS", "Layout"]

DEFAULT_GROUPS = 16
_MAX_GROUPS = 16384  # Redis Cluster's slot count: more groups could not be more slots


class Layout:
    """Key names for one prefix and group count."""

    def __init__(self, prefix: str, groups: int = DEFAULT_GROUPS) -> None:
        if not isinstance(prefix, str) or "\x00" in prefix:
            raise ConfigError(f"prefix={prefix!r}: use a string without NUL")
        if not 1 <= groups <= _MAX_GROUPS:
            raise ConfigError(f"groups={groups!r}: use a whole number from 1 to {_MAX_GROUPS}")
        self.prefix = prefix
        self.groups = groups
        self._bases = [f"{prefix}{{g{k}}}" for k in range(groups)]

    def group_of(self, channel_id: str) -> int:
        """The channel's group: stable across processes and runs (unlike ``hash()``)."""
        return zlib.crc32(channel_id.encode("utf-8", "surrogatepass")) % self.groups

    def base(self, group: int) -> str:
        """The start of every key of one group: the scripts' ``ARGV[1]``."""
        return self._bases[group]

    def key_group(self, key: ScopeKey) -> int:
        return self.group_of(key.channel_id)

    def anchor(self, group: int) -> str:
        """A key of the group every script declares first: it routes the call to the node
        serving the group's slot (the entry total, which every script reads anyway)."""
        return self._bases[group] + "n"

    def fixed_keys(self, group: int) -> list[str]:
        """The group's keys a script may touch whatever it does (totals, expiry set, fence,
        mark, settings), declared by every script of the group, and a key no one writes.

        That last one is what keeps a script whole while a cluster moves the group's slot:
        Redis runs a script only where every declared key is, and answers ``TRYAGAIN`` when
        some are missing on a node whose slot is migrating or importing. With a key always
        missing, no script of the group runs until the slot has moved (the call is tried
        again within its bound), so none ever finds part of its records on the other node."""
        b = self._bases[group]
        return [b + k for k in ("n", "b", "x", "th", "tb", "tl", "fm", "sv", "moving")]

    def record(self, key: ScopeKey, member: str) -> str:
        return f"{self._bases[self.key_group(key)]}e:{member}"

    def channel_index(self, channel_id: str) -> str:
        return f"{self._bases[self.group_of(channel_id)]}c:{channel_id}"

    def owner_index(self, group: int, kind: str, owner_id: str) -> str:
        if kind == "user":
            return self.user_index(group, user_target(owner_id))
        return f"{self._bases[group]}o:{kind}:{owner_id}"

    def user_index(self, group: int, target: str) -> str:
        """A user's keys in the group, by the user's digest (``user_target``)."""
        return f"{self._bases[group]}o:u:{target}"

    def author_index(self, group: int, target: str) -> str:
        """The group's keys holding a message by the user of digest ``target``."""
        return f"{self._bases[group]}a:{target}"

    def directory(self, kind: str, owner_id: str) -> str:
        return f"{self.prefix}{{o:{kind}:{owner_id}}}"

    def marker(self, kind: str, owner_id: str) -> str:
        return self.directory(kind, owner_id) + "c"

    def turns(self, group: int) -> str:
        """The start of the sidecar's turn keys for turns in the group's channels: in the
        group's slot, so a turn's read, end and guard travel with its capture and its rows."""
        return self._bases[group] + "t"
