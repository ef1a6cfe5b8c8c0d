"""``shortterm serve`` whose claims on shared turns last a given time:
``python -m tests.reliability.lease_replica LEASE_S serve ...`` (the arguments of ``serve``).

test_replica_dies.py kills such replicas mid-call and measures how soon another replica takes
their claims over. Only the lease is short: every operation keeps its default bound, so a
replica slowed down by a busy machine still starts, migrates and serves its turn start (with
``operation_timeout_s=0.4`` for the whole process, to get the same lease, it did not always).
"""

from __future__ import annotations

import sys
from typing import Any

import shortterm.sidecar.app as sidecar_app
from shortterm.cli import main


def _lease(lease_s: float) -> Any:
    # What the sidecar derives from the tiers' bounds (``_lease_s``), set directly instead.
    return lambda memory, cache: lease_s


if __name__ == "__main__":
    sidecar_app._lease_s = _lease(float(sys.argv.pop(1)))
    sys.argv[0] = "shortterm"
    main()
