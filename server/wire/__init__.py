"""The mapping between the API's messages (tierank.v1) and the server's own types, and only
that: a request's spec as the scheduler's and the judges' configuration (specs), storage
records and events as the API's resources (jobs, operations, admin), times and usage (common).
Below the layers that speak the wire (rpc, jobs, labeling); above the ones that do not
(storage, judges, tenancy, the scheduler), which never see a message.
"""

from tierank.server.wire.admin import (
    ROLES,
    key_view,
    limits_from_quota,
    quota_view,
    spend_view,
    tenant_view,
)
from tierank.server.wire.common import timestamp, usage_total
from tierank.server.wire.jobs import (
    TIER_EVENT_KINDS,
    fill_spec,
    job_detail,
    job_summary,
    tiers_to_proto,
)
from tierank.server.wire.operations import FILL_QRELS, QUALIFY_JUDGE, RESULT_TYPES, operation_view
from tierank.server.wire.specs import judge_config, passage_of, pool_context, tournament_config

__all__ = [
    "FILL_QRELS",
    "QUALIFY_JUDGE",
    "RESULT_TYPES",
    "ROLES",
    "TIER_EVENT_KINDS",
    "fill_spec",
    "job_detail",
    "job_summary",
    "judge_config",
    "key_view",
    "limits_from_quota",
    "operation_view",
    "passage_of",
    "pool_context",
    "quota_view",
    "spend_view",
    "tenant_view",
    "tiers_to_proto",
    "timestamp",
    "tournament_config",
    "usage_total",
]
