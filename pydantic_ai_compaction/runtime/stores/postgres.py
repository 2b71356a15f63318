"""A PostgreSQL store (psycopg 3, a `psycopg_pool` pool) for many workers: the same tables, full-text search.

Connections come from a pool that checks each one before handing it out, so a connection the server
dropped (a restart, a failover, `pg_terminate_backend`) is replaced by the next operation; an operation
whose connection breaks under it is tried once more on a fresh one. Any failure is an `ArchiveError`
naming the operation and the server (its DSN without the password).

A server that cannot be connected to is reported once, and operations then fail at once rather than each waiting
`connect_timeout` for a connection that cannot come, until an operation tries again after a back-off (a circuit
breaker, `_Breaker`): a refusal for the setup (a password or role refused, a database missing) with a
`SetupWarning`; an outage (a server down, a wrong host or port, an attempt timing out) with a `RuntimeWarning`, as
another answer of the server is (a connection limit, a start in progress), said as a refusal in its words. Only
a server no connection works with is one: a pool that cannot grow keeps serving from the connections it has.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
from collections.abc import Callable, Sequence
from itertools import chain, repeat
from time import monotonic
from typing import Any, TypeVar

from pydantic_ai_compaction.protocols.archive import ArchivedResult, ArchiveError, Hit, LogLine, Note
from pydantic_ai_compaction.runtime.checks import ConfigurationError, check_int, check_number
from pydantic_ai_compaction.runtime.degraded import SetupWarning, warn_degraded
from pydantic_ai_compaction.runtime.stores._query import (
    ARCHIVED_COLUMNS,
    MAX_BUSY_TIMEOUT_MS,
    SEARCH_CANDIDATES,
    archived_from_row,
    archived_row,
    db_text,
    index_text,
    line_context,
    py_text,
    query_words,
    rank_any_word,
    words,
)

T = TypeVar('T')

_TERMS_BUDGET = 900_000
"""Bytes of search terms per line, with their overhead: a `tsvector` holds at most 1 MB. A line of Chinese or
Japanese is as many words as characters (their pairs): at 400 KB it lost its words past about 15,000 characters."""

_LONGEST_WORD = 2_000
"""PostgreSQL does not index words over 2,047 bytes; longer ones are left out of the terms and queries."""


_PENDING_KB = 64
"""The GIN index's pending list, in kB (`gin_pending_list_limit`, the server's least): new lines' entries wait
there, and the writer whose line fills it merges them into the index, one visit of each word's entry for all
the lines waiting. Without a list (`fastupdate = off`) each line visited the entries of its words one by one
(about 20 for a log line): measured on the 10M-token log, one writer's server CPU per 80-line result was
10.8 to 15 ms without a list and 6.0 to 7.2 ms with this one. With the default 4 MB list every search read
thousands of waiting lines and the merge stalled the other writers; this one holds a result or two, though eight
writers fill it past its limit while one of them merges it (up to about 50 pages were seen), which `_HELD`
is written for."""

_GIN_OPTIONS = f'WITH (fastupdate = on, gin_pending_list_limit = {_PENDING_KB})'

_BASE_SCHEMA = """
CREATE TABLE IF NOT EXISTS pac_counters (
    conversation_id TEXT NOT NULL, name TEXT NOT NULL, value BIGINT NOT NULL,
    PRIMARY KEY (conversation_id, name)
);
CREATE TABLE IF NOT EXISTS pac_archived (
    conversation_id TEXT NOT NULL, ref TEXT NOT NULL, result_id TEXT NOT NULL, tool_name TEXT NOT NULL,
    tool_call_id TEXT NOT NULL, args_json TEXT NOT NULL, payload BYTEA NOT NULL, note TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (conversation_id, ref)
);
CREATE TABLE IF NOT EXISTS pac_notes (
    id BIGSERIAL PRIMARY KEY, conversation_id TEXT NOT NULL, kind TEXT NOT NULL, text TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS pac_indexed_parts (
    conversation_id TEXT NOT NULL, fingerprint TEXT NOT NULL, PRIMARY KEY (conversation_id, fingerprint)
);
CREATE TABLE IF NOT EXISTS pac_log (
    id BIGSERIAL PRIMARY KEY, conversation_id TEXT NOT NULL, text TEXT NOT NULL, context TEXT NOT NULL,
    source TEXT NOT NULL, tool_name TEXT NOT NULL, args TEXT NOT NULL, result_id TEXT NOT NULL,
    line_no INTEGER NOT NULL, owned_terms TSVECTOR NOT NULL
);
CREATE INDEX IF NOT EXISTS pac_log_conversation_newest ON pac_log (conversation_id, id);
CREATE TABLE IF NOT EXISTS pac_schema (version INTEGER NOT NULL);
"""
"""Every table and index but the search index (`_CREATE_GIN`)."""

_GIN_NAME = 'pac_log_owned_terms'

_CREATE_GIN = f'CREATE INDEX IF NOT EXISTS {_GIN_NAME} ON pac_log USING GIN (owned_terms) {_GIN_OPTIONS};'
"""The search index, made only when no index of its definition exists under any name (`_FIND_GIN`)."""

_FIND_GIN = """
SELECT index.relname FROM pg_index AS i
JOIN pg_class AS index ON index.oid = i.indexrelid
JOIN pg_am AS am ON am.oid = index.relam
JOIN pg_opclass AS opclass ON opclass.oid = i.indclass[0]
JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
WHERE i.indrelid = to_regclass('pac_log') AND am.amname = 'gin' AND i.indnatts = 1 AND a.attname = 'owned_terms'
    AND opclass.opcname = 'tsvector_ops' AND i.indexprs IS NULL AND i.indpred IS NULL AND i.indisvalid
ORDER BY index.relname <> %s, index.relname LIMIT 1
"""
"""The name of the log's search index, found by what it is (a valid GIN index over `owned_terms` alone, whole
table, the default operator class), not by its name: a database whose index was renamed by hand got a second
index beside it (`CREATE INDEX IF NOT EXISTS` knows names only), which every line written then updated twice."""

_SCHEMA = _BASE_SCHEMA + _CREATE_GIN
"""The current tables, as a new database gets them."""

SCHEMA_VERSION = 2
"""`pac_schema.version` of the current tables. 0 (no `pac_schema`): the log's search vector held each line's
words as they are, so a word every line holds (`log`, from the call `read_log`) had one GIN entry listing
every line of every conversation; 1: `owned_terms`, each word prefixed with its conversation's token
(`owner_prefix`), so an entry lists one conversation's lines; its GIN index without a pending list
(`fastupdate = off`: with the default 4 MB one, every search read the whole list of recent lines, and the
writer that flushed it stalled the others, which tripled recall p95 with 8 conversations writing); 2: the
same tables, the index with a small pending list (`_PENDING_KB`). An older database is migrated on first use;
workers of version 1 read and write a database of version 2 as before (only the index's settings differ)."""

_MIGRATE_TO_1 = """
ALTER TABLE pac_log ADD COLUMN owned_terms TSVECTOR;
UPDATE pac_log SET owned_terms = coalesce((
    SELECT string_agg('''' || left(md5(conversation_id), 10) || word || ''':' || least(n, 16383), ' ')
    FROM unnest(string_to_array(terms, ' ')) WITH ORDINALITY AS t(word, n) WHERE word <> ''
)::tsvector, ''::tsvector);
ALTER TABLE pac_log ALTER COLUMN owned_terms SET NOT NULL;
DROP INDEX IF EXISTS pac_log_tsv;
DROP INDEX IF EXISTS pac_log_conversation;
ALTER TABLE pac_log DROP COLUMN tsv, DROP COLUMN terms;
"""
"""Version 0 to 1, in the schema transaction: the vector rebuilt from the words each line kept (`terms`)."""

_MIGRATE_TO_2 = f'ALTER INDEX {{index}} SET (fastupdate = on, gin_pending_list_limit = {_PENDING_KB})'
"""Version 1 to 2: the index's settings only (no rebuild; the lines and their entries stay as they are); `{index}`
is the index's name (`_FIND_GIN`)."""

_TOLD_UNTUNED: set[str] = set()
"""The databases (server's system identifier and database name) this process warned about staying at version 1."""

_TUNE_LOCK_MS = 500
"""Longest the move from version 1 to 2 waits for the log's lock (`PostgresArchiveStore._tune_version_1`): the
other workers' statements on the log wait behind it as long."""

_PROBE = 150
"""The conversation's newest lines a search reads first, whatever the words (see `_NEWEST_MATCHES`): a sample
of how common they are, small since a query with no common word pays for it (about 2 µs a line)."""

_RARE = 8
"""Fewer matches than this among the `_PROBE` newest lines (about 5 %): the words are rare, the GIN index finds
the rest (its entries hold this conversation's lines only); else the scan goes on until there are enough."""

_COLUMNS = 'id, text, source, tool_name, args, result_id, line_no, owned_terms'

_OWN = '(conversation_id, id) > (%(key)s, 0) AND (conversation_id, id) <= (%(key)s, 9223372036854775807)'
"""`conversation_id = %(key)s` (ids start at 1), said so that the server reads the `(conversation_id, id)` index
newest first: told the key is one value, it orders by `id` alone and prefers the primary key, whose scan
reads every conversation's lines (8 for each one kept, with 8 conversations writing)."""


def _newest_of(limit: str) -> str:
    """The best *limit* (an SQL expression) of the conversation's newest `SEARCH_CANDIDATES` lines matching
    `asked.query`, as a `LATERAL` subquery; see `_NEWEST_MATCHES`."""
    return f"""(
WITH probe AS MATERIALIZED (
    SELECT {_COLUMNS}, owned_terms @@ asked.query AS hit
    FROM pac_log WHERE {_OWN} ORDER BY conversation_id DESC, id DESC LIMIT {_PROBE}
),
seen AS MATERIALIZED (
    SELECT count(*) FILTER (WHERE hit) AS hits, count(*) = {_PROBE} AS more, min(id) AS oldest FROM probe
),
found AS (
    SELECT {_COLUMNS} FROM probe WHERE hit
    UNION ALL
    (SELECT {_COLUMNS} FROM (
        SELECT {_COLUMNS} FROM pac_log
        WHERE {_OWN} AND id < (SELECT oldest FROM seen) ORDER BY conversation_id DESC, id DESC OFFSET 0
    ) AS older
    WHERE owned_terms @@ asked.query
        AND (SELECT more AND hits >= {_RARE} AND hits < {SEARCH_CANDIDATES} FROM seen)
    LIMIT (SELECT greatest({SEARCH_CANDIDATES} - hits, 0) FROM seen))
    UNION ALL
    SELECT {_COLUMNS} FROM (
        SELECT conversation_id, {_COLUMNS} FROM pac_log WHERE owned_terms @@ asked.query OFFSET 0
    ) AS every
    WHERE every.conversation_id = %(key)s AND every.id < (SELECT oldest FROM seen)
        AND (SELECT more AND hits < {_RARE} FROM seen)
)
SELECT id, text, source, tool_name, args, result_id, line_no, ts_rank(owned_terms, asked.query) AS score
FROM (SELECT * FROM found ORDER BY id DESC LIMIT {SEARCH_CANDIDATES}) AS newest
ORDER BY source <> 'tool', score DESC, id DESC LIMIT {limit}
)"""


_NEWEST_MATCHES = f"""
SELECT asked.n, matches.* FROM unnest(%(queries)s::tsquery[]) WITH ORDINALITY AS asked(query, n)
CROSS JOIN LATERAL {_newest_of('%(limit)s')} AS matches
"""
"""For each `tsquery` of `%(queries)s` (its position `n`), the best `%(limit)s` of the conversation's newest
`SEARCH_CANDIDATES` lines matching it: one statement (for all the words of a query, when recall ranks each
word's matches), whose plan does not depend on the server's guess of how common the words are.

The `_PROBE` newest lines of the conversation are read first (`_OWN`). Many matches there (`_RARE` or more:
a word many lines hold, such as the call's `read_log`) continue the same scan until there are enough, about
`SEARCH_CANDIDATES` lines per share of lines matching; few mean rare words, whose every match the GIN index
lists (each word carries the conversation's prefix, so the list holds this conversation's lines only). The
branches not taken never run (their condition is a one-time filter). The server left to choose for one query
over the whole log read the GIN entry of a word every line holds (tens of thousands of lines), or scanned tens
of thousands of lines for a rare one."""

_HELD = f"""(
    EXISTS (
        SELECT 1 FROM (
            SELECT owned_terms FROM pac_log WHERE {_OWN} ORDER BY conversation_id DESC, id DESC LIMIT {_PROBE}
        ) AS probe
        WHERE probe.owned_terms @@ asked.query
    )
    OR EXISTS (
        WITH every AS MATERIALIZED (SELECT conversation_id FROM pac_log WHERE owned_terms @@ asked.query)
        SELECT 1 FROM every WHERE every.conversation_id = %(key)s
    )
)"""
"""Whether a line of the conversation matches `asked.query` (a word and its prefix matches): a common word is
found among the `_PROBE` newest lines, else the GIN index lists every match (none, for a word no line holds; the
second test runs only when the first fails). Told to find one row with the conversation's key, the server
scanned the whole log for a word no line holds, expecting a match among the first lines: it weighs that bet
against the GIN index's cost, which grows with the index's pending list (`_PENDING_KB`; 0.5 s per word with
40 pending pages). The lines matching are planned as a whole (`MATERIALIZED`), so the server reads them from
the index whatever its estimates; they are still read only until the first of the conversation."""

_SEARCH = f"""
WITH every_whole AS MATERIALIZED (
    SELECT 0 AS stage, asked.n, matches.* FROM unnest(%(every_whole)b::tsquery[]) WITH ORDINALITY AS asked(query, n)
    CROSS JOIN LATERAL {_newest_of('%(limit)s')} AS matches
),
present AS MATERIALIZED (
    SELECT asked.n, {_HELD} AS held FROM unnest(%(each_prefix)b::tsquery[]) WITH ORDINALITY AS asked(query, n)
    WHERE cardinality(%(each_prefix)b::tsquery[]) > 1 AND NOT EXISTS (SELECT FROM every_whole)
),
every_prefix AS MATERIALIZED (
    SELECT 1 AS stage, asked.n, matches.* FROM unnest(%(every_prefix)b::tsquery[]) WITH ORDINALITY AS asked(query, n)
    CROSS JOIN LATERAL {_newest_of('%(limit)s')} AS matches
    WHERE NOT EXISTS (SELECT FROM every_whole) AND NOT EXISTS (SELECT FROM present WHERE NOT held)
),
each_whole AS MATERIALIZED (
    SELECT 2 AS stage, asked.n, matches.* FROM unnest(%(each_whole)b::tsquery[]) WITH ORDINALITY AS asked(query, n)
    JOIN present ON present.n = asked.n AND present.held
    CROSS JOIN LATERAL {_newest_of(str(SEARCH_CANDIDATES))} AS matches
    WHERE NOT EXISTS (SELECT FROM every_whole) AND NOT EXISTS (SELECT FROM every_prefix)
),
each_prefix AS MATERIALIZED (
    SELECT 3 AS stage, asked.n, matches.* FROM unnest(%(each_prefix)b::tsquery[]) WITH ORDINALITY AS asked(query, n)
    JOIN present ON present.n = asked.n AND present.held
    CROSS JOIN LATERAL {_newest_of(str(SEARCH_CANDIDATES))} AS matches
    WHERE NOT EXISTS (SELECT FROM every_whole) AND NOT EXISTS (SELECT FROM every_prefix)
        AND NOT EXISTS (SELECT FROM each_whole)
)
SELECT * FROM every_whole UNION ALL SELECT * FROM every_prefix
UNION ALL SELECT * FROM each_whole UNION ALL SELECT * FROM each_prefix
"""
"""A whole search in one statement, one round trip (`PostgresArchiveStore.search`): each stage runs only when
the ones before it found nothing (its condition is a one-time filter, and a `MATERIALIZED` stage is read only
when a later one asks). Stage 0: lines holding every word (`_newest_of`, the best `%(limit)s`); else which
words some line starts (`present`, `_HELD`; asked only of a query of several words); stage 1, when every word
is held: lines holding a word each word starts; else, for the words held, each word's newest
`SEARCH_CANDIDATES` matches as a whole word (stage 2), else as a prefix (stage 3), which recall ranks together.

Asked in turn, statement by statement, a search took up to four round trips (a query whose words are
prefixes, `inc-00001`, took three): with eight conversations writing on two cores, each round trip waited
for the server's process and then the reader's to be scheduled again, which made the slowest searches."""


_SESSION_OPTIONS = '-c plan_cache_mode=force_generic_plan -c jit=off'
"""Every connection's settings besides the lock timeout. A statement run often on a connection is prepared there
(psycopg does it from the fifth run), and its plan is made once (`force_generic_plan`): the server otherwise
planned every search again (0.6 ms of CPU for one stage, 3 ms for `_SEARCH`), since the plan for any key, whose
shape the statements fix (`_newest_of`), is estimated costlier than one for the key given. No JIT compilation:
a plan estimated over `jit_above_cost` (the plan for any key, which counts ten rows in each array, or one for a
query of many words) was compiled for about 45 ms before a search that then ran in 1 ms."""


def _own_options(dsn: str) -> str:
    """The `options` the DSN (else `PGOPTIONS`) gives, after a space: the store's `options` replaced them, so a
    DSN's `-c search_path=...` or `-c statement_timeout=...` was dropped without a word. Set after the store's,
    they win where both set one parameter, as the user asked."""
    import os

    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        given = conninfo_to_dict(dsn).get('options')
    except ProgrammingError:
        return ''  # a DSN libpq cannot read: the connections report it
    given = os.environ.get('PGOPTIONS') if given is None else given
    return f' {given}' if given and str(given).strip() else ''


_REFUSALS = (
    'authentication failed',
    'is not permitted to log in',
    'no password supplied',
    'no pg_hba.conf entry',
    'permission denied for database',
    'does not exist',
    'invalid value for parameter',
    'unrecognized configuration parameter',
    'does not support ssl',
)
"""Words of the answer to a connection refused for the setup: a password, a role (or one that may not log in) or a
host refused, a role or a
database missing (`does not exist`, which a login says of nothing else), a setting of the DSN's `options` the
server rejects, SSL required of a server without it. A failed connection carries no `sqlstate`, so its text is
read; a server answering in another language is not recognised, and its refusals are reported as the server's
other answers are (`_ANSWERED`)."""

_ANSWERED = ('fatal:', 'error:', 'does not support ssl')
"""Words of a failed connection attempt that the server answered (its message, not a TCP or DNS failure): said as
the server refusing the connection, with its message, and not as a server that cannot be reached (a host or a
port to check), though the same back-off applies (a server starting up, or at its connection limit)."""

_RETRY_FIRST = 1.0
"""Seconds after a failed connection attempt during which operations fail at once, without trying to connect;
each attempt that fails again doubles it, up to `_RETRY_MOST`. A restart or a failover is over within seconds,
and is picked up after 1, 2 or 4 s; a server that stays away (a wrong port or host, a server stopped) costs one
attempt every 30 s, which for a host that never answers is one operation waiting `connect_timeout` among all
the others that fail at once (with a fixed 1 s, such a host would keep an operation waiting most of the time).
Refusals and outages alike: a password changed or a database created on the server is picked up as a server
coming back is."""

_RETRY_MOST = 30.0
"""The longest back-off between attempts (`_RETRY_FIRST`), in seconds: as long as a refused login made operations
fail at once before outages had a back-off."""

_POLL = 0.25
"""Seconds an operation waits for the pool at a time while no connection attempt has succeeded yet: between
waits it looks whether an attempt failed, so the first operation on a store whose server cannot be reached
fails as soon as the pool's attempt does, not after `connect_timeout`."""


class _Breaker:
    """Whether the server can be connected to, for all the store's operations (any thread): a circuit breaker.

    Closed (no failure): operations take connections from the pool. Once a connection attempt failed (the pool's
    or an operation's) and an operation met it, open: every operation fails at once, with the attempt's error,
    until `retry_at`; then half-open: the first operation connects itself (`PostgresArchiveStore._probe`)
    while the others still fail at once, and either closes it (the server answers: the store works again,
    without a new store) or opens it again for twice as long (`_RETRY_FIRST`). Any attempt that connects closes
    it at once. The first failure of an episode is warned about once (`told`).
    """

    def __init__(self) -> None:
        self.failure: str | None = None
        """The latest connection attempt's error, when it failed; `None` once one connected (or before any)."""
        self.kind = 'outage'
        """What `failure` is: `setup` (a refusal for the setup, `_REFUSALS`), `refused` (another answer of the
        server, `_ANSWERED`) or `outage` (no answer: a server down, a wrong host or port, a timeout)."""
        self.failures = 0
        """Failed attempts so far: an operation waiting on the pool sees a new one by this count."""
        self.attempts = 0
        """Connection attempts so far, the pool's and the operations' own: each one a round trip, or a wait of up
        to `connect_timeout` on a host that does not answer."""
        self.pending = 0
        """Connection attempts under way: one that fails while another may still connect (the pool's first
        connection and its growth, started together) is no outage yet."""
        self.unanswered: tuple[float, str] = (float('-inf'), '')
        """When (`monotonic()`) an attempt last failed without an answer while a connection worked, and its error."""
        self.begun: list[float] = []
        """When (`monotonic()`) each attempt under way began: one under way for three quarters of `connect_timeout`
        or more when an operation's wait for the pool ends is no busy pool's growth but a host that does not answer."""
        self.retry_at = 0.0
        """Until when (`monotonic()`) operations fail at once; the first one after tries to connect."""
        self.interval = _RETRY_FIRST
        """The back-off the next failed attempt of an operation sets (`retry_at`)."""
        self.probing = False
        """Whether an operation is trying to connect (half-open): the others fail at once meanwhile."""
        self.told: str | None = None
        """The `kind` of failure warned about in this episode, `None` if none: told once until a connection
        succeeds, and again if a refusal follows an outage or the other way round."""
        self.working = False
        """Whether a connection works: an attempt connected and no connection broke since. Then an operation
        waits for the pool in one piece (`_POLL`), and a failed attempt is the pool failing to grow (a server's or
        a pooler's connection limit), not an outage: the operations wait for the working connections."""
        self.wake: Callable[[], None] = lambda: None
        """Ends the waits of the operations queued on the pool (the store's `_wake_waiters`), when an attempt
        fails with no connection working."""
        self.lock = threading.Lock()
        """Guards the fields: the pool's threads and the operations' threads write them."""

    def failed(self, error: BaseException) -> None:
        """A connection attempt failed with *error*: an outage only if no connection works (`working`) and no
        other attempt is under way (`pending`)."""
        text = ' '.join(str(error).split())
        lowered = text.lower()
        kind = (
            'setup'
            if any(word in lowered for word in _REFUSALS)
            else 'refused'
            if any(word in lowered for word in _ANSWERED)
            else 'outage'
        )
        with self.lock:
            self.pending -= 1
            if self.working or self.pending:
                # The pool could not grow (a server's or a pooler's connection limit) while its connections work,
                # or one may still connect: the operations waiting get one of those. Unanswered, it is noted: an
                # operation that then waits `connect_timeout` in vain takes it for an outage.
                if kind == 'outage':
                    self.unanswered = (monotonic(), text)
                return
            self.failure, self.kind = text, kind
            self.failures += 1
        # Waiters queued in one piece (`working` was true when they asked) would wait `connect_timeout`.
        self.wake()

    def connected(self) -> None:
        """A connection attempt succeeded: closed, and the back-off starts again from `_RETRY_FIRST`."""
        with self.lock:
            self.pending -= 1
            self.failure, self.told, self.working = None, None, True
            self.retry_at, self.interval = 0.0, _RETRY_FIRST

    def lost(self) -> None:
        """A connection broke under an operation: the server may be gone, so the next wait for the pool is made
        in pieces (`working`), and an attempt that fails meanwhile ends it, not `connect_timeout`."""
        with self.lock:
            self.working = False

    def trip(self, failure: str | None = None) -> None:
        """Open for the current back-off (called with `lock` held), then double it; *failure* if none is known
        (an attempt still running when the operation's wait ended)."""
        now = monotonic()
        self.working = False  # taken for an outage: the next attempts that fail are not the pool's growth
        if self.failure is None:
            self.failure, self.kind = failure or 'no connection', 'outage'
        if self.retry_at <= now:  # operations that met one failure together back off once
            self.retry_at = now + self.interval
            self.interval = min(self.interval * 2, _RETRY_MOST)


def _ended(breaker: _Breaker, begun: float) -> None:
    """The attempt begun at *begun* is no longer under way (`_Breaker.begun`)."""
    with breaker.lock:
        breaker.begun.remove(begun)


def _watched_connections(breaker: _Breaker) -> type[Any]:
    """A connection class that tells *breaker* how each connection attempt ended: the pool connects in its own
    thread and only logs why it failed, so an operation waiting on it knew only that it timed out."""
    import psycopg

    class WatchedConnection(psycopg.Connection[Any]):
        @classmethod
        def connect(cls, conninfo: str = '', **kwargs: Any) -> Any:  # pyright: ignore[reportIncompatibleMethodOverride]
            begun = monotonic()
            with breaker.lock:
                breaker.attempts += 1
                breaker.pending += 1
                breaker.begun.append(begun)
            try:
                conn = super().connect(conninfo, **kwargs)
            except psycopg.OperationalError as error:
                _ended(breaker, begun)
                breaker.failed(error)
                raise
            except BaseException:
                _ended(breaker, begun)
                with breaker.lock:
                    breaker.pending -= 1
                raise
            _ended(breaker, begun)
            breaker.connected()
            return conn

    return WatchedConnection


def _masked(dsn: str) -> str:
    """*dsn*, which psycopg could not read, with anything that may be a password masked, as an error shows it."""
    masked = re.sub(r'(://[^:/@\s]*:).*@', r'\1***@', dsn)
    masked = re.sub(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)", r'\1***', masked, flags=re.IGNORECASE)
    shown = repr(masked)
    return shown if len(shown) <= 80 else shown[:77] + '...'


def _create_tables(conn: Any) -> None:
    """The tables and indexes missing (`_SCHEMA`; the search index looked for by its definition, `_FIND_GIN`),
    and the search index's version 2 settings (`_MIGRATE_TO_2`)."""
    from psycopg import sql

    conn.execute(_BASE_SCHEMA)
    row = conn.execute(_FIND_GIN, (_GIN_NAME,)).fetchone()
    if row is None:
        conn.execute(_CREATE_GIN)
    name = _GIN_NAME if row is None else str(row[0])
    conn.execute(_MIGRATE_TO_2.format(index=sql.Identifier(name).as_string(conn)))


def owner_prefix(conversation_id: str) -> str:
    """What every word of a conversation's lines starts with in `owned_terms`: 10 hex digits of the key's MD5.

    The same as SQL's `left(md5(conversation_id), 10)` (the migration computes it there); short, since every
    word of every line carries it. Not a secret and not a check: every query also compares the key itself, so
    two keys with one prefix never share lines (they only share GIN entries).
    """
    return hashlib.md5(conversation_id.encode(), usedforsecurity=False).hexdigest()[:10]


def redact_dsn(dsn: str) -> str:
    """*dsn* without its secrets (`password`, `sslpassword`), as errors show it."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        params = conninfo_to_dict(dsn)
    except Exception:  # an unparsable DSN: show none of it, it may hold a password
        return '<unparsable DSN>'
    for secret in _SECRET_KEYS:
        params.pop(secret, None)
    return make_conninfo('', **params)


_SECRET_KEYS = ('password', 'sslpassword')
"""libpq keys holding a secret: the password, and the one that unlocks the client's SSL key."""


def _owned_terms(prefix: str, text: str) -> str:
    """A line's `owned_terms` as `tsvector` input: its words (as every store splits them), each after
    *prefix*, at its position (as `to_tsvector` numbers words), within what a `tsvector` can hold.

    Every writer builds this for each line it indexes, under the interpreter lock that a search in another
    thread of the process waits for: ASCII text short enough that no word can be too long nor the terms over
    budget (every line of a log) skips the per-word size count.
    """
    found = words(text)
    lead = f"'{prefix}"
    overhead = len(prefix) + 12  # the lexeme's entry and position besides its text
    kept: list[str]
    if text.isascii() and len(text) <= _LONGEST_WORD and len(text) + overhead * len(found) <= _TERMS_BUDGET:
        kept = found  # ASCII words are as long in bytes as in characters, and no longer than the text
    else:
        kept = []
        size = 0
        for word in found:
            length = len(word.encode())
            if length > _LONGEST_WORD:
                continue
            size += length + overhead
            if size > _TERMS_BUDGET:
                break
            kept.append(word)
    # Words are letters and digits only: nothing to escape inside the quotes. Joined in C (`chain` of the lead,
    # the word and its position's text), not formatted word by word: a writer does this for every line.
    positions = _POSITIONS if len(kept) <= _LAST_POSITION else chain(_POSITIONS, repeat(_POSITIONS[-1]))
    return ''.join(chain.from_iterable(zip(repeat(lead), kept, positions)))[:-1]


_LOG_COLUMNS = 'conversation_id, text, context, source, tool_name, args, result_id, line_no, owned_terms'

_COPY_LOG = f'COPY pac_log ({_LOG_COLUMNS}) FROM STDIN'
"""New lines in bulk (the `owned_terms` text is read as `tsvector` input, as the cast of an insert reads it).

Not one `INSERT ... SELECT FROM unnest(...)` of the parts and the lines, which takes one round trip where this
transaction takes four: with eight conversations writing, the searches of a reader timed between them were
slower with it (recall p95 1.3 to 2.5 times in three interleaved runs), though a write cost the server as much
CPU; `COPY` inserts its rows in batches."""


def _part_keys(lines: Sequence[LogLine]) -> list[tuple[str, str]]:
    """The distinct `(conversation_id, fingerprint)` of *lines*, as stored, sorted.

    Parts are registered in one order for every writer: each insert locks its key until the transaction ends,
    and two batches naming the same parts in different orders deadlocked (one of them failed).
    """
    return sorted({(db_text(line.conversation_id), db_text(line.fingerprint)) for line in lines})


_LAST_POSITION = 16_383
"""The largest position a `tsvector` holds; later words share it."""

_POSITIONS = tuple(f"':{n} " for n in range(1, _LAST_POSITION + 1))
"""What follows the *n*-th word in `_owned_terms`: the quote closing it, its position and a space."""


def _query(prefix: str, wanted: Sequence[str], suffix: str) -> str:
    """`tsquery` input: every word of *wanted* after *prefix* (*suffix* `:*` for prefix matches)."""
    return ' & '.join(f"'{prefix}{word}'{suffix}" for word in wanted)


class PostgresArchiveStore:
    """Tables prefixed `pac_`; every write is one transaction; reads filter by conversation."""

    def __init__(
        self, dsn: str, *, max_connections: int = 4, connect_timeout: float = 10.0, busy_timeout_ms: int = 10_000
    ) -> None:
        """Start the pool, which connects in the background; the first operation creates the tables if needed.

        Nothing here waits for the server: an unreachable server is reported by the operations, as
        every other failure is, and the store works as soon as the server answers.

        Args:
            dsn: A libpq connection string, e.g. `postgresql://user:pass@127.0.0.1/db`.
            max_connections: Connections the pool may open (threads of one process share them).
            connect_timeout: Seconds an operation waits for a connection before it fails: the pool's connections
                all in use, or a connection attempt that neither connects nor fails (a host that drops packets).
                While no connection works, a failed attempt (a port closed, a host unknown, a login refused)
                ends the wait at once, that of the operations already queued too, and
                until the store tries again (after 1 s, then 2 s, 4 s, ... up to 30 s) every operation fails at
                once with that attempt's error, reported once with a warning (`_Breaker`).
            busy_timeout_ms: Longest a statement may wait for a lock held by another worker, in milliseconds,
                as in `SQLiteArchiveStore`: 0 does not wait (an operation that finds the lock taken fails at
                once; PostgreSQL's `lock_timeout` of 0 would wait forever, so it is set to 1 ms, its least).
                On PostgreSQL that also bounds the server's own short locks, which writers of different
                conversations take on the shared tables: with several writers, 0 makes an occasional write
                fail (reported as any store fault is, the run goes on). Keep the default where writes matter.
        """
        try:
            from psycopg_pool import ConnectionPool
        except ImportError as error:
            raise ImportError(
                'PostgresArchiveStore needs the postgres extra: pip install "pydantic-ai-compaction[postgres]"'
            ) from error

        if not isinstance(dsn, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError(f'PostgresArchiveStore.dsn must be a string, got {type(dsn).__name__}.')
        from psycopg import Error
        from psycopg.conninfo import conninfo_to_dict

        try:
            conninfo_to_dict(dsn)  # psycopg's own reading: any DSN it accepts is accepted
        except (Error, UnicodeEncodeError):  # the latter: a lone surrogate, which no connection string can send
            # Only the DSN, masked, not libpq's reason: it quotes pieces of the string, which may be a password's.
            raise ConfigurationError(
                'PostgresArchiveStore.dsn must be a libpq connection string or a postgresql:// URI, '
                f'got {_masked(dsn)} (str), which psycopg cannot read.'
            ) from None
        self.max_connections = check_int('PostgresArchiveStore', 'max_connections', max_connections, minimum=1)
        self.connect_timeout = check_number(
            'PostgresArchiveStore', 'connect_timeout', connect_timeout, minimum=0, exclusive_minimum=True
        )
        self.busy_timeout_ms = check_int(
            'PostgresArchiveStore', 'busy_timeout_ms', busy_timeout_ms, minimum=0, maximum=MAX_BUSY_TIMEOUT_MS
        )
        self.target = redact_dsn(dsn)
        """The server errors name: the DSN without its password."""
        self._schema_ready = False
        self._schema_lock = threading.Lock()
        self._breaker = _Breaker()
        """How the connection attempts ended: operations fail at once while the server cannot be reached."""
        self._connection_class = _watched_connections(self._breaker)
        self._dsn = dsn
        self._connect_options: dict[str, Any] = {
            'autocommit': True,
            'connect_timeout': max(1, round(self.connect_timeout)),
            'options': f'-c lock_timeout={max(self.busy_timeout_ms, 1)} {_SESSION_OPTIONS}{_own_options(dsn)}',
        }
        """The pool's connections' settings, which an operation trying the server again (`_probe`) uses too."""
        self._pool: Any = ConnectionPool(
            dsn,
            connection_class=self._connection_class,
            min_size=1,
            max_size=self.max_connections,
            open=False,
            kwargs=self._connect_options,
            timeout=self.connect_timeout,
            # A failed attempt of the pool is tried once more, then given up: the store's back-off decides when to
            # try again (`_Breaker`). With the pool's own (1 s, 2 s, 4 s, ... for 5 minutes), each chain of
            # attempts went on in the background whatever the store knew, each attempt logged as a warning by
            # `psycopg.pool`: 16 in a 6-step run on a wrong port.
            reconnect_timeout=0,
            name='pydantic-ai-compaction',
        )
        self._breaker.wake = self._wake_waiters
        self._closed = False
        """Whether `close` was called: every operation then fails at once, without connecting."""
        self._pool.open(wait=False)

    def close(self) -> None:
        """Close the pool and its connections; every later operation fails at once, saying so."""
        self._closed = True  # before the pool: an operation starting meanwhile must not probe the server
        self._pool.close()

    def _wake_waiters(self) -> None:
        """End the wait of every operation queued on the pool (each sees the failed attempt, `_checkout`).

        The pool has no public way to do it: its queue is read under its lock, and a waiter already served or
        timed out ignores it (`WaitingClient.fail`). A pool without that queue leaves the waits as they are.
        """
        from psycopg_pool import PoolTimeout

        pool: Any = self._pool
        lock, waiting = getattr(pool, '_lock', None), getattr(pool, '_waiting', None)
        if lock is None or waiting is None:
            return
        with lock:
            queued = list(waiting)
        for client in queued:
            client.fail(PoolTimeout('a connection attempt failed'))

    def _error(self, operation: str, error: BaseException | str) -> ArchiveError:
        return ArchiveError(
            f'PostgreSQL archive: {operation} failed on {self.target}: {error}'.strip(),
            operation=operation,
            target=self.target,
        )

    def _checkout(self, operation: str) -> Any:
        """A pooled connection within `connect_timeout`, or an `ArchiveError` as soon as a connection attempt
        fails, and at once while the breaker is open (`_Breaker`); the first failure of an episode is warned
        about (`_unreachable`).

        With connections working this is the pool's `getconn` alone: no attempt, no round trip of its own.
        """
        from psycopg_pool import PoolClosed, PoolTimeout

        if self._closed:
            raise self._error(operation, 'the store is closed')
        breaker = self._breaker
        started = monotonic()
        with breaker.lock:
            seen = breaker.failures
            down = breaker.failure is not None
            # Open, or another operation is trying the server: fail at once. Else, after a failure, try it here.
            fail_now = down and (breaker.probing or started < breaker.retry_at)
            if down and not fail_now:
                breaker.probing = True
        if fail_now:
            raise self._unreachable(operation)
        if down:
            self._probe(operation)
        deadline = started + self.connect_timeout
        while True:
            with breaker.lock:
                failed = breaker.failures > seen and breaker.failure is not None
                if failed:
                    breaker.trip()
            if failed:  # an attempt made while this operation waited failed: waiting longer would not help
                raise self._unreachable(operation)
            left = deadline - monotonic()
            if left <= 0:
                last = breaker.failure
                waited = f'no connection within {self.connect_timeout:g} s' + (
                    f' (the last attempt: {last})' if last else ''
                )
                # The pool holding no connection: none works, though none broke under an operation (the pool
                # replaced an expired one while the server was away), so no later attempt would be taken for one.
                empty = not self._pool.get_stats().get('pool_size')
                now = monotonic()
                with breaker.lock:
                    # An attempt under way for three quarters of this operation's wait, or longer: a host that does
                    # not answer (a working connection, not yet seen broken, would otherwise keep this a busy
                    # pool). Not the whole wait: the pool starts its attempt a moment after the operation starts
                    # waiting, and the operation then took a silent host for a busy pool, once in a while. Not much
                    # less: a busy pool growing on a server slow to connect is no outage.
                    stuck = any(now - begun >= self.connect_timeout * 0.75 for begun in breaker.begun)
                    # An attempt failed unanswered while this operation waited, and no connection came back.
                    unanswered = breaker.unanswered[0] >= started
                    unreachable = empty or not breaker.working or stuck or unanswered
                    if unreachable:  # no attempt connected: an attempt still running, a host that does not answer
                        breaker.trip(waited)
                if unreachable:
                    raise self._unreachable(operation, waited)
                raise PoolTimeout(waited)  # connections work, all in use by other operations: no outage
            try:
                # Waited in pieces only while no attempt succeeded: a waiter whose piece ends goes to the back of
                # the pool's queue, which a busy pool's waiters should not.
                return self._pool.getconn(timeout=left if breaker.working else min(left, _POLL))
            except PoolClosed:  # closed while this operation waited
                raise self._error(operation, 'the store is closed') from None
            except PoolTimeout:
                if self._closed:
                    raise self._error(operation, 'the store is closed') from None
                continue

    def _probe(self, operation: str) -> None:
        """Connect once, in the operation's thread, to see whether the server answers again (half-open): the
        pool gave up its attempts (`reconnect_timeout`), and waiting on it would wait its next one. Else the
        breaker opens for a longer back-off and the operation fails (`_unreachable`).

        The connection is closed: the pool makes its own, now that an attempt succeeded.
        """
        import psycopg

        breaker = self._breaker
        try:
            conn = self._connection_class.connect(self._dsn, **self._connect_options)
        except psycopg.Error:
            with breaker.lock:
                breaker.trip()
            raise self._unreachable(operation) from None
        finally:
            with breaker.lock:  # whatever ended the attempt: else every later operation would fail at once
                breaker.probing = False
        conn.close()

    def _unreachable(self, operation: str, cause: str | None = None) -> ArchiveError:
        """The error of *operation* while the server cannot be connected to (*cause*, else the latest attempt's
        error), after warning about it if it is the first of its kind since a connection last succeeded."""
        breaker = self._breaker
        with breaker.lock:
            cause, kind = cause or breaker.failure or 'no connection', breaker.kind
            tell, breaker.told = breaker.told != kind, kind
            wait = math.ceil(max(0.0, breaker.retry_at - monotonic()))
        if tell:
            run_on = (
                'every operation of the store fails at once and the run goes on without it (Archive keeps results '
                'in context, Notes keep notes in the conversation, Recall answers that it is unavailable)'
            )
            if kind == 'setup':
                warn_degraded(
                    f'PostgreSQL archive on {self.target}: the server refused the connection ({cause}). Check the '
                    f"DSN's user, password, database and parameters. Until a connection succeeds, {run_on}; an "
                    f'operation tries again after {wait} s, then at doubling intervals up to {_RETRY_MOST:.0f} s.',
                    category=SetupWarning,
                )
            elif kind == 'refused':
                # The server answered: its host and port are right, its message says why.
                warn_degraded(
                    f'PostgreSQL archive on {self.target}: the server refused the connection ({cause}). Until a '
                    f'connection succeeds, {run_on}; an operation tries again after {wait} s, then at doubling '
                    f'intervals up to {_RETRY_MOST:.0f} s.'
                )
            else:
                warn_degraded(
                    f'PostgreSQL archive on {self.target}: the server cannot be reached ({cause}). Check that it '
                    f"runs and the DSN's host and port. Until a connection succeeds, {run_on}; an operation tries "
                    f'again after {wait} s, then at doubling intervals up to {_RETRY_MOST:.0f} s.'
                )
        said = 'the server cannot be reached' if kind == 'outage' else 'the server refused the connection'
        return ArchiveError(
            f'PostgreSQL archive: {operation} failed on {self.target}: {said} ({cause})',
            operation=operation,
            target=self.target,
            setup=kind == 'setup',
            reported=True,
        )

    def _ensure_schema(self, conn: Any) -> None:
        if self._schema_ready:
            return
        with self._schema_lock, conn.transaction():
            # Serialize schema creation and migration across workers starting together.
            conn.execute('SELECT pg_advisory_xact_lock(7415)')
            version = None
            if conn.execute("SELECT to_regclass('pac_schema')").fetchone()[0] is not None:
                row = conn.execute('SELECT max(version) FROM pac_schema').fetchone()
                version = None if row[0] is None else int(row[0])
                if version is not None and version >= SCHEMA_VERSION:
                    self._schema_ready = True
                    return
            if version == 1:
                skipped = self._tune_version_1(conn)
                if skipped is not None:
                    self._schema_ready = True  # used as version 1 left it: workers of both versions read it alike
                    self._tell_untuned(conn, skipped)
                    return
            else:
                old_log = conn.execute(
                    "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('pac_log') AND attname = 'terms' "
                    'AND NOT attisdropped'
                ).fetchone()
                if old_log is not None:
                    conn.execute(_MIGRATE_TO_1)
                _create_tables(conn)  # an index of version 1 kept as it is, then tuned
            conn.execute('DELETE FROM pac_schema')
            conn.execute('INSERT INTO pac_schema (version) VALUES (%s)', (SCHEMA_VERSION,))
        self._schema_ready = True

    def _tune_version_1(self, conn: Any) -> str | None:
        """Version 1 to 2 (the index's settings), if it can be done now: `None` if it was, else why not.

        Version 1's tables are version 2's, so the move is a tuning, never a condition of use. A role that may
        only read and write rows (no `CREATE` on the schema, not the index's owner) cannot make it, and while
        any worker's transaction holds the log it waits for that transaction, every other worker's statement on
        the log queued behind it: it waits `_TUNE_LOCK_MS` at most, then the database is used as it is, and the
        next store to start tries again.
        """
        import psycopg

        wait = max(1, min(self.busy_timeout_ms, _TUNE_LOCK_MS))  # `lock_timeout = 0` would wait forever
        try:
            with conn.transaction():  # a savepoint: undone alone if the tuning fails
                conn.execute(f"SET LOCAL lock_timeout = '{wait}ms'")
                _create_tables(conn)  # an index dropped by hand is built again, as for any older version
        except psycopg.errors.InsufficientPrivilege as error:
            return f'this role may not change them: {error.diag.message_primary or error}'
        except psycopg.errors.LockNotAvailable:
            return f'another connection held the log longer than {wait} ms; the next store to open tries again'
        return None

    def _tell_untuned(self, conn: Any, reason: str) -> None:
        """Warn, once per server and database in the process, that the database stays at version 1, and what to
        run to finish the move: `pac_schema.version` was the only sign, and version 1's index makes every
        writer's lines cost about twice the server's time (see `_PENDING_KB`)."""
        # The database itself, not the DSN: two spellings of one server (`localhost`, `127.0.0.1`, a socket)
        # warned twice. `pg_control_system()` may be run by any role.
        database = conn.execute('SELECT (SELECT system_identifier FROM pg_control_system()), current_database()')
        told = '/'.join(str(value) for value in database.fetchone())
        if told in _TOLD_UNTUNED:
            return
        _TOLD_UNTUNED.add(told)
        row = conn.execute(_FIND_GIN, (_GIN_NAME,)).fetchone()
        from psycopg import sql

        name = sql.Identifier(_GIN_NAME if row is None else str(row[0])).as_string(conn)
        message = (
            f'PostgreSQL archive on {self.target}: the tables stay at schema version 1 ({reason}). Recall works as '
            'before, but its writes cost the server about twice the time of version 2. To finish the move, run as '
            'the owner of the tables, or open a PostgresArchiveStore with that role: '
            f'ALTER INDEX {name} SET (fastupdate = on, gin_pending_list_limit = {_PENDING_KB}); '
            f'UPDATE pac_schema SET version = {SCHEMA_VERSION};'
        )
        # Made an error (`-W error`), it escaped the store and failed the agent's run, though the store works.
        warn_degraded(message, stacklevel=2)

    def _run(self, operation: str, work: Callable[[Any], T]) -> T:
        """*work* on a pooled connection; once more on a fresh one if the first broke; `ArchiveError` else."""
        import psycopg

        lost: BaseException | None = None
        for _ in range(2):
            try:
                conn = self._checkout(operation)
                try:
                    with conn:  # as the pool's `connection()`, which waits `connect_timeout` in one piece
                        try:
                            self._ensure_schema(conn)
                            return work(conn)
                        except psycopg.OperationalError as error:
                            # A dropped connection: the pool discards it on return; try again on a fresh one.
                            if not conn.broken or lost is not None:
                                raise
                            lost = error
                            self._breaker.lost()
                finally:
                    self._pool.putconn(conn)
                # Here only when the connection broke. The server may have ended the idle ones too (a restart):
                # replace them before the retry. Checked here, not on every checkout: that cost each operation
                # one more round trip.
                self._pool.check()
            except (psycopg.Error, ValueError, OverflowError) as error:
                if isinstance(error, psycopg.errors.LockNotAvailable) and not self._schema_ready:
                    # Raised by `_ensure_schema` (the operation itself never ran): say what waited, and what next.
                    raise self._error(
                        operation,
                        f'{error}: moving the tables to schema version {SCHEMA_VERSION} waits until no other '
                        f'connection uses them, longer than busy_timeout_ms ({self.busy_timeout_ms} ms); nothing '
                        'was changed, and the next operation tries again',
                    ) from error
                raise self._error(operation, error) from error
        raise self._error(operation, lost or RuntimeError('connection lost'))

    def next_numbers(self, conversation_id: str, counter: str, count: int) -> list[int]:
        """Reserve consecutive numbers atomically (row lock through the upsert)."""

        def work(conn: Any) -> int:
            with conn.transaction():
                row = conn.execute(
                    'INSERT INTO pac_counters (conversation_id, name, value) VALUES (%s, %s, %s) '
                    'ON CONFLICT (conversation_id, name) DO UPDATE SET value = pac_counters.value + EXCLUDED.value '
                    'RETURNING value',
                    (db_text(conversation_id), db_text(counter), count),
                ).fetchone()
            return int(row[0])

        end = self._run('next_numbers', work)
        return list(range(end - count + 1, end + 1))

    def put_archived(self, entries: Sequence[ArchivedResult]) -> None:
        """One transaction for the whole batch."""
        rows = [archived_row(entry) for entry in entries]

        insert = f'INSERT INTO pac_archived ({ARCHIVED_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)'

        def work(conn: Any) -> None:
            if len(rows) == 1:  # one statement is a transaction: one round trip, where a transaction takes three
                conn.execute(insert, rows[0])
                return
            with conn.transaction(), conn.cursor() as cursor:
                cursor.executemany(insert, rows)

        self._run('put_archived', work)

    def get_archived(self, conversation_id: str, ref: str) -> ArchivedResult | None:
        """This conversation's entry only."""
        row = self._run(
            'get_archived',
            lambda conn: conn.execute(
                f'SELECT {ARCHIVED_COLUMNS} FROM pac_archived WHERE conversation_id = %s AND ref = %s',
                (db_text(conversation_id), db_text(ref)),
            ).fetchone(),
        )
        return archived_from_row(row)

    def add_note(self, conversation_id: str, note: Note) -> None:
        """Append a note."""
        params = (db_text(conversation_id), db_text(note.kind), db_text(note.text))

        def work(conn: Any) -> None:
            with conn.transaction():
                conn.execute('INSERT INTO pac_notes (conversation_id, kind, text) VALUES (%s, %s, %s)', params)

        self._run('add_note', work)

    def notes(self, conversation_id: str) -> list[Note]:
        """Oldest first."""
        rows = self._run(
            'notes',
            lambda conn: conn.execute(
                'SELECT kind, text FROM pac_notes WHERE conversation_id = %s ORDER BY id', (db_text(conversation_id),)
            ).fetchall(),
        )
        return [Note(py_text(kind), py_text(text)) for kind, text in rows]  # pyright: ignore[reportArgumentType]

    def indexed(self, conversation_id: str, fingerprints: Sequence[str]) -> set[str]:
        """Known fingerprints."""
        if not fingerprints:
            return set()
        rows = self._run(
            'indexed',
            lambda conn: conn.execute(
                'SELECT fingerprint FROM pac_indexed_parts WHERE conversation_id = %s AND fingerprint = ANY(%s)',
                (db_text(conversation_id), [db_text(fingerprint) for fingerprint in fingerprints]),
            ).fetchall(),
        )
        return {py_text(row[0]) for row in rows}

    def index_lines(self, lines: Sequence[LogLine]) -> int:
        """Add lines of parts not indexed yet, in one transaction."""
        if not lines:
            return 0
        return self._run('index_lines', lambda conn: self._index(conn, lines))

    def _index(self, conn: Any, lines: Sequence[LogLine]) -> int:
        import psycopg

        try:
            # `COPY`: the rows are formatted in psycopg's C code, where `executemany` ran Python for each row
            # (about 4 ms of interpreter time a 80-line result, which a search in another thread of the process
            # waited for). No savepoint around it (two more round trips): a line the server will not index
            # undoes the whole transaction, and the lines go in again one by one.
            with conn.transaction():
                rows = self._fresh_rows(conn, lines)
                with conn.cursor() as cursor, cursor.copy(_COPY_LOG) as copy:
                    for row in rows:
                        copy.write_row(row)
            return len(rows)
        except (psycopg.errors.DataError, psycopg.errors.ProgramLimitExceeded):
            pass
        # One line the server will not index must not keep the others out: line by line, skipping it.
        insert = f'INSERT INTO pac_log ({_LOG_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s::tsvector)'
        added = 0
        with conn.transaction():
            for row in self._fresh_rows(conn, lines):
                try:
                    with conn.transaction():
                        conn.execute(insert, row)
                    added += 1
                except (psycopg.errors.DataError, psycopg.errors.ProgramLimitExceeded):
                    continue
        return added

    def _fresh_rows(self, conn: Any, lines: Sequence[LogLine]) -> list[tuple[Any, ...]]:
        """The `pac_log` rows of *lines* whose parts were not indexed yet, which it marks as indexed."""
        fresh: dict[tuple[str, str], bool] = {}
        rows: list[tuple[Any, ...]] = []
        prefixes: dict[str, str] = {}
        keys = [(db_text(line.conversation_id), db_text(line.fingerprint)) for line in lines]
        for key in _part_keys(lines):
            inserted = conn.execute(
                'INSERT INTO pac_indexed_parts (conversation_id, fingerprint) VALUES (%s, %s) '
                'ON CONFLICT DO NOTHING RETURNING 1',
                key,
            ).fetchone()
            fresh[key] = inserted is not None
        for line, key in zip(lines, keys, strict=True):
            if fresh[key]:
                text, context = index_text(line.text), line_context(line)
                prefix = prefixes.get(key[0]) or prefixes.setdefault(key[0], owner_prefix(key[0]))
                # The search vector is built from the same words every store matches on, so an email,
                # a path or a host name splits into words here exactly as in SQLite and in memory.
                rows.append(
                    (key[0], text, context, line.source, index_text(line.tool_name), index_text(line.args),
                     index_text(line.result_id), line.line_no, _owned_terms(prefix, f'{text} {context}'))
                )  # fmt: skip
        return rows

    def search(self, conversation_id: str, query: str, limit: int = 8) -> list[Hit]:
        """Full-text search over the line and its call; every word, else any word; whole words before prefixes.

        Tool output first. Lines holding every word: the newest `SEARCH_CANDIDATES` of them ranked by
        `ts_rank`; else each word's newest `SEARCH_CANDIDATES` matches ranked together by `rank_any_word`,
        as the SQLite store does. One statement (`_SEARCH`), one round trip.
        """
        wanted = [word for word in query_words(query) if len(word.encode()) <= _LONGEST_WORD]
        if not wanted:
            return []
        key = db_text(conversation_id)
        prefix = owner_prefix(key)
        params = {
            'key': key,
            'limit': limit,
            'every_whole': [_query(prefix, wanted, '')],
            'every_prefix': [_query(prefix, wanted, ':*')],
            'each_whole': [_query(prefix, [word], '') for word in wanted],
            'each_prefix': [_query(prefix, [word], ':*') for word in wanted],
        }

        def work(conn: Any) -> list[Hit]:
            return _ranked(conn.execute(_SEARCH, params).fetchall(), len(wanted), limit)

        return self._run('search', work)


def _ranked(rows: Sequence[Sequence[Any]], count: int, limit: int) -> list[Hit]:
    """The hits of `_SEARCH`'s rows `(stage, n, id, ...)` for a query of *count* words (one stage has rows)."""
    if not rows:
        return []
    if rows[0][0] < 2:  # lines holding every word, the best *limit*: in the order `_newest_of` ranks them
        best = sorted(rows, key=lambda row: (row[4] != 'tool', -row[9], -row[2]))
        return [_hit(tuple(row[3:])) for row in best]
    per_word: list[list[tuple[int, Hit]]] = [[] for _ in range(count)]
    for row in rows:
        per_word[int(row[1]) - 1].append((int(row[2]), _hit(tuple(row[3:]))))
    return rank_any_word(per_word, limit)


def _hit(row: tuple[Any, ...]) -> Hit:
    """A hit from a candidate row (`ts_rank` is higher for better matches, as a hit's score)."""
    return Hit(row[0], row[1], row[2], row[3], row[4], int(row[5]), float(row[6]))
