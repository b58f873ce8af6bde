"""Seed 001 tables (object memory). Raw events stay in ``messages`` (never copied): the hot
timeline, the archive queue and attachments refer to them by message id."""

from __future__ import annotations

from sqlalchemy import JSON, Boolean, Column, Date, Index, Integer, String, Table, Text, UniqueConstraint, text

from memory_pipeline.lib.store.tables import ID, UTCDateTime, metadata, now_utc
from memory_pipeline.objects.logic import QUEUED_STATES

OID = String(128)
# The rows of the organize queue, as the queue index's predicate and the claim's WHERE both write it
# (a planner uses a partial index only for a query whose WHERE implies its predicate).
QUEUE_PREDICATE = "state IN (" + ", ".join(f"'{s}'" for s in QUEUED_STATES) + ")"

# Per world (an agent): graph revision, runtime flags, cooldown, the worker's current error.
objects_worlds = Table(
    "objects_worlds",
    metadata,
    Column("world_id", ID, primary_key=True),
    Column("graph_revision", Integer, nullable=False, default=0),
    Column("busy", Boolean, nullable=False, default=False),  # set by the agent runtime
    Column("stopped", Boolean, nullable=False, default=False),
    Column("auto_suppressed_until", UTCDateTime),
    Column("worker_error", Text),
    Column("worker_error_at", UTCDateTime),
    Column("last_deep_date", Date),
    Column("next_seq", Integer, nullable=False, default=0),
)

# The hot timeline: raw slices (level 0) and summary heads (level >= 1) whose children expand
# level by level. Active nodes are the agent's resident timeline.
objects_hot_nodes = Table(
    "objects_hot_nodes",
    metadata,
    Column("node_id", String(160), primary_key=True),
    Column("world_id", ID, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("level", Integer, nullable=False),
    Column("event_id", ID),  # raw slices only
    Column("slice_index", Integer),
    Column("text", Text, nullable=False),
    Column("est_tokens", Integer, nullable=False),
    Column("first_at", UTCDateTime, nullable=False),
    Column("last_at", UTCDateTime, nullable=False),
    Column("active", Boolean, nullable=False),
    Column("parent_id", String(160)),
    Column("children", JSON),
    Column("receipt_token", String(128)),
    Column("created_at", UTCDateTime, nullable=False, default=now_utc),
    Index("ix_objects_hot_nodes_world_active_seq", "world_id", "active", "seq"),
    Index("ix_objects_hot_nodes_event", "event_id"),
)

# One row per raw event this domain saw: its state, page cursor, progress and final outcome.
objects_event_state = Table(
    "objects_event_state",
    metadata,
    Column("event_id", ID, primary_key=True),
    Column("world_id", ID, nullable=False),
    Column("occurred_at", UTCDateTime, nullable=False),
    Column("event_day", Date, nullable=False),
    Column("chars", Integer, nullable=False),
    Column("state", String(16), nullable=False),
    Column("page_cursor", Integer, nullable=False, default=0),
    Column("progress", Text, nullable=False, default=""),
    Column("reason", Text, nullable=False, default=""),
    Column("queued_at", UTCDateTime),
    Column("explicit", Boolean, nullable=False, default=False),  # re-queued by an explicit request
    Column("finished_at", UTCDateTime),
    Column("updated_at", UTCDateTime, nullable=False, default=now_utc),
    Index("ix_objects_event_state_world_state", "world_id", "state", "occurred_at"),
    Index("ix_objects_event_state_day", "event_day", "state"),
    # The organize queue in claim order, holding only queued events (migration 0033): a claim reads
    # its first entry instead of sorting the world's whole backlog (a backlog of n cost n² to drain).
    Index(
        "ix_objects_event_state_queue",
        "world_id",
        text("explicit DESC"),
        "occurred_at",
        "event_id",
        postgresql_where=text(QUEUE_PREDICATE),
        sqlite_where=text(QUEUE_PREDICATE),
    ),
)

objects_objects = Table(
    "objects_objects",
    metadata,
    Column("world_id", ID, primary_key=True),
    Column("object_id", OID, primary_key=True),
    Column("type", String(16), nullable=False),
    Column("name", String(256), nullable=False),
    Column("aliases", JSON, nullable=False),
    Column("summary", Text, nullable=False),
    Column("body", Text, nullable=False),
    Column("cues", JSON, nullable=False),
    Column("status", String(16), nullable=False),
    Column("purpose", Text),
    Column("reference", Text),
    Column("version", Integer, nullable=False),
    Column("revision", Integer, nullable=False),
    Column("created_at", UTCDateTime, nullable=False, default=now_utc),
    Column("updated_at", UTCDateTime, nullable=False, default=now_utc),
    Index("ix_objects_objects_world_type", "world_id", "type"),
)

# Every prior version and an audit row per write; nothing is deleted automatically.
objects_versions = Table(
    "objects_versions",
    metadata,
    Column("version_id", Integer, primary_key=True, autoincrement=True),
    Column("world_id", ID, nullable=False),
    Column("object_id", OID, nullable=False),
    Column("version", Integer, nullable=False),
    Column("revision", Integer, nullable=False),
    Column("action", String(16), nullable=False),  # create | update | approve
    Column("snapshot", JSON, nullable=False),
    Column("receipt_token", String(128)),
    Column("at", UTCDateTime, nullable=False, default=now_utc),
    UniqueConstraint("world_id", "object_id", "version", name="uq_objects_versions"),
)

objects_relations = Table(
    "objects_relations",
    metadata,
    Column("world_id", ID, primary_key=True),
    Column("src", OID, primary_key=True),
    Column("label", String(256), primary_key=True),  # legacy free-text labels stay readable
    Column("dst", OID, primary_key=True),
    Column("legacy", Boolean, nullable=False, default=False),
    Column("status", String(16), nullable=False, default="active"),
    Column("revision", Integer, nullable=False),
    Column("created_at", UTCDateTime, nullable=False, default=now_utc),
    Index("ix_objects_relations_dst", "world_id", "dst"),
)

# Object -> event (evidence) and event -> object (archive): one row, indexed both ways.
objects_attachments = Table(
    "objects_attachments",
    metadata,
    Column("world_id", ID, primary_key=True),
    Column("object_id", OID, primary_key=True),
    Column("event_id", ID, primary_key=True),
    Column("revision", Integer, nullable=False),
    Column("created_at", UTCDateTime, nullable=False, default=now_utc),
    Index("ix_objects_attachments_event_world", "event_id", "world_id", "object_id"),  # a claim's lookup (0037)
)

# The current core documents; every version (the prior ones included) is in objects_core_versions.
objects_core = Table(
    "objects_core",
    metadata,
    Column("world_id", ID, primary_key=True),
    Column("name", String(16), primary_key=True),  # AGENTS.md | SOUL.md | USER.md
    Column("content", Text, nullable=False),
    Column("revision", Integer, nullable=False),  # the graph revision that wrote this version
    Column("updated_at", UTCDateTime, nullable=False, default=now_utc),
    Column("version", Integer, nullable=False, default=1, server_default="1"),
    Column("written_by", String(16), nullable=False, default="unknown", server_default="unknown"),  # CoreAuthor
)

# Every version of a core document, who wrote it (a model commit or a human import), under which
# graph revision and when: a write never loses the text it replaces. Nothing is deleted.
objects_core_versions = Table(
    "objects_core_versions",
    metadata,
    Column("version_id", Integer, primary_key=True, autoincrement=True),
    Column("world_id", ID, nullable=False),
    Column("name", String(16), nullable=False),
    Column("version", Integer, nullable=False),
    Column("revision", Integer, nullable=False),
    Column("written_by", String(16), nullable=False),  # CoreAuthor
    Column("content", Text, nullable=False),
    Column("receipt_token", String(128)),  # a model commit's receipt
    Column("at", UTCDateTime, nullable=False, default=now_utc),
    UniqueConstraint("world_id", "name", "version", name="uq_objects_core_versions"),
)

# Compact / organize / deep jobs (the enqueue receipts of memory_organize and the automatic ones).
objects_jobs = Table(
    "objects_jobs",
    metadata,
    Column("job_id", Integer, primary_key=True, autoincrement=True),
    Column("world_id", ID, nullable=False),
    Column("mode", String(16), nullable=False),
    Column("origin", String(16), nullable=False),
    Column("scope", Text, nullable=False, default=""),
    Column("retry_blocked", Boolean, nullable=False, default=False),
    Column("request_token", String(128), unique=True),
    Column("status", String(16), nullable=False),
    Column("created_at", UTCDateTime, nullable=False, default=now_utc),
    Column("last_claimed_at", UTCDateTime),
    Column("not_before", UTCDateTime),
    Column("claims", Integer, nullable=False, default=0),
    Column("batches_done", Integer, nullable=False, default=0),
    Column("consecutive_failures", Integer, nullable=False, default=0),
    Column("range_end_seq", Integer),  # compact: the range fixed at the first claim
    Column("inventory", JSON),  # deep: every object id at the first claim
    Column("inventory_pos", Integer, nullable=False, default=0),
    Column("local_date", Date),  # deep: the local date it reviews
    Column("error", Text),
    Column("finished_at", UTCDateTime),
    Index("ix_objects_jobs_world_status", "world_id", "status"),
)

# Failure history: never rewritten as done.
objects_failures = Table(
    "objects_failures",
    metadata,
    Column("failure_id", Integer, primary_key=True, autoincrement=True),
    Column("world_id", ID, nullable=False),
    Column("job_id", Integer, nullable=False),
    Column("mode", String(16), nullable=False),
    Column("batch", Text, nullable=False),
    Column("error", Text, nullable=False),
    Column("at", UTCDateTime, nullable=False, default=now_utc),
)

# One receipt per committed batch; a replayed token returns it unchanged.
objects_receipts = Table(
    "objects_receipts",
    metadata,
    Column("token", String(128), primary_key=True),
    Column("world_id", ID, nullable=False),
    Column("job_id", Integer),
    Column("mode", String(16), nullable=False),
    Column("revision", Integer, nullable=False),
    Column("event_id", ID),  # organize: the claimed event
    Column("event_day", Date),  # the CST day of that event (the partition it belongs to)
    Column("outcome", String(16)),
    Column("detail", JSON, nullable=False),
    Column("created_at", UTCDateTime, nullable=False, default=now_utc),
    Index("ix_objects_receipts_day", "event_day"),
)

# Markdown projection state: what was written for each object (and each core document, keyed by
# its name), the last error, and what the last check found on disk.
objects_projection = Table(
    "objects_projection",
    metadata,
    Column("world_id", ID, primary_key=True),
    Column("object_id", OID, primary_key=True),
    Column("path", String(256), nullable=False),
    Column("content_hash", String(64), nullable=False),
    Column("revision", Integer, nullable=False),
    Column("projected_at", UTCDateTime, nullable=False, default=now_utc),
    Column("error", Text),
    Column("pages", Integer, nullable=False, default=1, server_default="1"),
    Column("drift", String(16)),  # missing | differs: found by the last check, until rewritten
)
