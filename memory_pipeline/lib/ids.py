"""The one alphabet of stored identifiers (message, conversation and world ids).

An id is 1-128 characters of ``A-Z a-z 0-9`` and ``. _ - @ + = / #``; it never starts with ``/``
and never contains ``..``. Ids become parts of colon-separated cache keys (``{prefix}:{id}:...``),
scan patterns, file names and log lines, so ``:``, glob characters (``* ? [ ]``), whitespace,
control characters and anything outside ASCII are refused where ids enter the store."""

from __future__ import annotations

import re
from urllib.parse import quote

MAX_ID_CHARS = 128
ID_CHARS = "A-Za-z0-9._@+=/#-"  # a regex character class body
ID_ALPHABET = "A-Z a-z 0-9 . _ - @ + = / #"
ID_RULE = f"1-{MAX_ID_CHARS} characters of {ID_ALPHABET}, not starting with '/', without '..'"
ID_PATTERN = rf"(?!/)(?!.*\.\.)[{ID_CHARS}]{{1,{MAX_ID_CHARS}}}"
ID_RE = re.compile(ID_PATTERN)
_BAD_CHAR = re.compile(rf"[^{ID_CHARS}]")


def validate_id(value: object) -> str | None:
    """The problem with ``value`` as an id (always stating the rule), or None when it is one."""
    if not isinstance(value, str):
        return f"must be a string ({ID_RULE})"
    if not value:
        return f"must not be empty ({ID_RULE})"
    if len(value) > MAX_ID_CHARS:
        return f"too long: {len(value)} characters (ids are {ID_RULE})"
    bad = _BAD_CHAR.search(value)
    if bad:
        return f"character {bad.group()!r} at position {bad.start()} is not allowed (ids are {ID_RULE})"
    if value.startswith("/"):
        return f"must not start with '/' (ids are {ID_RULE})"
    if ".." in value:
        return f"must not contain '..' (ids are {ID_RULE})"
    return None


def is_id(value: object) -> bool:
    return isinstance(value, str) and ID_RE.fullmatch(value) is not None


def path_segment(value: str) -> str:
    """An id as one file or folder name, one to one: every character but letters, digits and
    ``_.-~`` percent-encoded (``a/b`` is ``a%2Fb``), and a leading dot too. Ids may hold ``/`` and
    ``.``: used as they are, ``odd``, ``odd/``, ``./odd`` and ``odd/.`` named one folder, and
    ``aria/person`` a folder inside ``aria``'s."""
    segment = quote(value, safe="")
    return "%2E" + segment[1:] if segment.startswith(".") else segment
