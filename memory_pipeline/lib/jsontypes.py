"""JSON as a type: what a tool, an API call or a report hands across a package's boundary when its
shape is JSON's and no narrower type says more. A reader narrows a value before using it
(``isinstance``), so a field read wrong fails mypy instead of a caller."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

JSONScalar: TypeAlias = str | int | float | bool | None
JSONValue: TypeAlias = JSONScalar | list["JSONValue"] | dict[str, "JSONValue"]
JSONObject: TypeAlias = dict[str, JSONValue]
# Arguments: read-only views, so a caller's dict[str, str] or list[int] is accepted as it is.
JSONLike: TypeAlias = JSONScalar | Sequence["JSONLike"] | Mapping[str, "JSONLike"]
JSONMapping: TypeAlias = Mapping[str, JSONLike]
