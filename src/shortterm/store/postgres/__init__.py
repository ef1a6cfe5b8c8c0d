"""PostgreSQL durable tier (psycopg 3, an async connection pool, autocommit).

Every statement is prepared on first use per connection (``prepare_threshold=0``), except
through a pooler in transaction mode (URL option ``pooler=transaction``, said rather than
detected: see :meth:`PostgresStore.from_url`), where nothing is prepared. A logical
operation touching one row is a single autocommit statement; one touching several rows runs in
one transaction sent as a pipeline, so it costs one network round trip and applies whole or not
at all. Counters and category merges are computed by the server inside the upsert
(``INSERT … ON CONFLICT … DO UPDATE … RETURNING``), so concurrent writers in any number of
processes never lose an update.

PostgreSQL refuses NUL in ``text`` and ``jsonb``: every string is passed through
:func:`shortterm.model.text.clean_text` (NUL becomes U+FFFD) before it is sent, JSON values
included.

A dropped connection fails the operation in flight with ``StoreUnavailable`` (it is never
retried: a write whose commit was not confirmed must not be applied twice); the pool then
checks its idle connections so the next operation gets a working one once the server is back.
A server that stops answering without closing the connection (a partition, a stalled host)
would leave libpq waiting forever, so every operation, from getting a connection to reading
the result, is bounded by ``operation_timeout_s`` and then fails with ``StoreUnavailable``. A
query cut off in flight makes psycopg try to cancel it on the server first, which can add up
to 10 s before the connection is given up. The pool retries a failed connection for at most
``pool_reconnect_timeout_s`` (default 2 s, psycopg's own default is 5 minutes of growing
back-off), after which the next operation starts a fresh attempt: so once the server is back,
operations succeed again within that delay instead of waiting out the back-off.
A wait for a pooled connection ends after ``pool_timeout_s``, or sooner when
``operation_timeout_s`` would: ``StoreUnavailable`` naming the pool, its ``pool_max_size`` and
the server's refusal when a connection attempt met one (``too many clients already``); the
store's ``pool_trouble`` keeps it for ``/readyz`` until a wait begun after it is served.
While the server is down (the pool's newest connection attempt failed: a restart, a crash, a
failover), an operation does not wait for the pool at all: it connects on its own within 0.5 s
or fails at once (see ``pooled.UNREACHABLE_WAIT_S``), so no call waits out an outage.
Before the pool first opens, one direct connection is tried: an address that refuses
connections, or a host name that does not resolve, fails at once naming ``host:port``; a server
that refuses the login for good (no such role or database, authentication failed) fails at once
with the server's own reason (``PostgreSQL refused the connection: role "bot" does not exist``);
so does a certificate that fails TLS (``sslmode=verify-full&sslrootcert=ca.crt`` with the wrong
CA: ``PostgreSQL TLS connection failed: SSL error: certificate verify failed (…)``).

One more connection, outside the pool, LISTENs for other processes' journal entries and
proves itself alive with a heartbeat every third of ``listen_timeout_s``; while it has not
within that time, every call reads the journal's end itself (see :mod:`.journal`). Through a
transaction pooler it cannot LISTEN and only polls the journal's end (its heartbeat), unless
``listen_url`` names a direct connection to LISTEN on. A process thus holds up to
``pool_max_size`` + 1 connections (docs/design.md, "The connection budget").

URL options (removed before the URL reaches libpq): ``schema`` (tables live in that schema,
created on migration), ``pool_min_size`` (default 1), ``pool_max_size`` (default 4),
``pool_timeout_s`` (default 30), ``pool_reconnect_timeout_s`` (default 2),
``operation_timeout_s`` (default 30), ``listen_timeout_s`` (default 1), ``pooler``
(``transaction`` or ``none``, the default), ``listen_url`` (percent-encoded). Standard libpq
options such as ``application_name`` or ``connect_timeout`` pass through; any other option is
refused by name (``ConfigError``) when the store is made, with the accepted ones.
"""

from .store import PostgresStore

__all__ = ["PostgresStore"]
