"""Values every resource carries: times and usage."""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf import timestamp_pb2

from tierank.server.judges.base import JudgeUsage
from tierank.v1 import rank_pb2


def timestamp(seconds: float) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


def usage_total(parts: Sequence[JudgeUsage]) -> rank_pb2.Usage:
    return rank_pb2.Usage(
        input_tokens=sum(u.input_tokens for u in parts),
        output_tokens=sum(u.output_tokens for u in parts),
        cached_input_tokens=sum(u.cached_input_tokens for u in parts),
        cache_write_input_tokens=sum(u.cache_write_input_tokens for u in parts),
        cost_usd=sum(u.cost_usd for u in parts),
        latency_seconds=sum(u.latency_s for u in parts),
    )
