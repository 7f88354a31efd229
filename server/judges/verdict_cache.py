"""The verdict cache key: the same question to the same judge deserves the same paid answer."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from tierank.server.judges.base import Passage


def cache_key(
    tenant: str, judge_identity: str, rubric: str, query: str, presented: Sequence[Passage]
) -> str:
    """Content hash over everything that shapes the answer, candidate texts in presented order.

    Ids are left out on purpose: the same texts under other ids deserve the same verdict, so
    the cached ordering is stored as positions and mapped back onto the asking batch's ids.
    """
    material = json.dumps(
        [tenant, judge_identity, rubric, query, [p.text for p in presented]],
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


def encode_ordering(ordering: Sequence[str], presented: Sequence[Passage]) -> bytes:
    position = {p.id: i for i, p in enumerate(presented)}
    return json.dumps([position[i] for i in ordering]).encode()


def decode_ordering(payload: bytes, presented: Sequence[Passage]) -> tuple[str, ...]:
    return tuple(presented[i].id for i in json.loads(payload))
