"""What an import did: one report shape for every import format.

Each format fills the fields it knows and leaves the rest at their defaults: a JSON-lines
import counts ``rows`` and ``written``; a DiscordChatExporter import names the scope it wrote
(``key``) and counts messages. :meth:`ImportReport.describe` words either for a person.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..model import ScopeKey

__all__ = ["ImportReport"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportReport:
    """What an import did (or, with ``dry_run``, would do)."""

    format: Literal["jsonl", "discord"]
    dry_run: bool = False
    skipped_private: int = 0  # left out for the privacy setting of their user or author
    # JSON lines (durable rows)
    rows: int = 0  # valid rows in the file
    written: int = 0  # rows written (0 for a dry run)
    capped: int = 0  # rows with a value cut to max_summary_chars
    # DiscordChatExporter (one channel's messages); ``key`` is None when nothing was written
    file: str | None = None
    key: ScopeKey | None = None
    server_id: str | None = None
    channel_id: str | None = None
    channel_name: str | None = None
    messages_seen: int = 0  # message objects in the file
    messages_kept: int = 0  # written to the scope (after merging with what it held)
    imported: int = 0  # of those, taken from the file
    skipped_system: int = 0
    skipped_empty: int = 0
    skipped_forgotten: int = 0  # covered by a clear or a purge (the platform keeps them)
    first_at: float | None = None  # the oldest and newest imported message
    last_at: float | None = None
    process_local: bool = False  # the messages live in this process's hot tier only
    reason: str | None = None  # why nothing was written

    def describe(self) -> list[str]:
        """What the import did, in lines for a person."""
        if self.format == "discord":
            return self._describe_messages()
        if self.dry_run:
            lines = [f"{self.rows} valid row(s); nothing written (dry run)"]
        else:
            lines = [f"imported {self.written} of {self.rows} row(s)"]
        if self.skipped_private:
            lines.append(
                f"left out {self.skipped_private} user-scope row(s) of users whose privacy "
                "setting forbids personal memory"
            )
        if self.capped:
            lines.append(f"cut {self.capped} row(s) with values over max_summary_chars")
        return lines

    def _describe_messages(self) -> list[str]:
        if self.key is None:
            return [f"nothing imported from {self.file}: {self.reason}"]
        verb = "would import" if self.dry_run else "imported"
        lines = [
            f"{verb} {self.imported} message(s) into #{self.channel_name or self.channel_id} "
            f"({self.messages_kept} kept; skipped {self.skipped_system} system, "
            f"{self.skipped_empty} empty, {self.skipped_private} by full-privacy authors"
            + (f", {self.skipped_forgotten} covered by a forget" if self.skipped_forgotten else "")
            + ")"
        ]
        if self.process_local and not self.dry_run:
            lines.append(
                "warning: the messages went into this command's in-process hot tier and are "
                "gone when it exits; import into a shared cache with --cache redis://..."
            )
        return lines
