"""Resource names (AIP-122): the one place that builds and parses them.

A job is `jobs/{job_id}`; one of its verdicts is `jobs/{job_id}/verdicts/{call_id}`; an API key
is `keys/{key_id}`; a tenant is `tenants/{tenant}`; a judge's qualification is
`qualifications/{id}`; a long-running request (QualifyJudge, FillQrels) is `operations/{id}`; a
study is `studies/{id}`.
"""

from __future__ import annotations

import re
import secrets
import time

from tierank.resources import (
    JOB_COLLECTION,
    KEY_COLLECTION,
    OPERATION_COLLECTION,
    QUALIFICATION_COLLECTION,
    STUDY_COLLECTION,
    TENANT_COLLECTION,
    VERDICT_COLLECTION,
)

_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_CALL_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_ID_RULE = "1 to 64 letters, digits, '-' or '_'"
TENANT_RULE = f"must be {_ID_RULE}"


class BadName(ValueError):
    """A resource name that does not have its collection's shape; the message is the rule."""


def new_sortable_id() -> str:
    """Sortable by creation time, so listing newest-first needs no extra index."""
    return f"{time.time_ns() // 1_000_000:012x}{secrets.token_hex(6)}"


def qualification_name(qualification_id: str) -> str:
    return f"{QUALIFICATION_COLLECTION}/{qualification_id}"


def operation_name(operation_id: str) -> str:
    return f"{OPERATION_COLLECTION}/{operation_id}"


def parse_operation_name(name: str) -> str:
    """The id of `operations/{id}`."""
    return _single(OPERATION_COLLECTION, name)


def study_name(study_id: str) -> str:
    return f"{STUDY_COLLECTION}/{study_id}"


def parse_study_name(name: str) -> str:
    """The id of `studies/{id}`."""
    return _single(STUDY_COLLECTION, name)


_STUDY_REQUEST = re.compile(r"study-([A-Za-z0-9_-]{1,64})-q[0-9]+(-after-[A-Za-z0-9_-]+)?")


def study_request_id(study_id: str, position: int, continues: str = "") -> str:
    """The request_id of a study query's job: the same on every try, so a job is made once;
    a query judged again after an extension names the job it continues."""
    request_id = f"study-{study_id}-q{position}"
    return f"{request_id}-after-{continues}" if continues else request_id


def batch_owner(job_id: str, request_id: str) -> str:
    """Whose provider batches a job's calls go into: its study's ("studies/{id}"), so that a
    study's wave is one batch per judge and cancelling the study cancels them; else the
    job's own ("jobs/{id}")."""
    study = _STUDY_REQUEST.fullmatch(request_id)
    return study_name(study.group(1)) if study else job_name(job_id)


def job_name(job_id: str) -> str:
    return f"{JOB_COLLECTION}/{job_id}"


def key_name(key_id: str) -> str:
    return f"{KEY_COLLECTION}/{key_id}"


def tenant_name(tenant: str) -> str:
    return f"{TENANT_COLLECTION}/{tenant}"


def _single(collection: str, name: str) -> str:
    prefix = f"{collection}/"
    resource_id = name.removeprefix(prefix)
    if resource_id == name or not _ID.fullmatch(resource_id):
        raise BadName(f"must look like '{collection}/{{id}}' ({_ID_RULE})")
    return resource_id


def parse_job_name(name: str) -> str:
    """The job id of `jobs/{job_id}`."""
    return _single(JOB_COLLECTION, name)


def parse_key_name(name: str) -> str:
    """The key id of `keys/{key_id}`."""
    return _single(KEY_COLLECTION, name)


def parse_qualification_name(name: str) -> str:
    """The qualification id of `qualifications/{id}`."""
    return _single(QUALIFICATION_COLLECTION, name)


def parse_verdict_name(name: str) -> tuple[str, str]:
    """(job id, call id) of `jobs/{job_id}/verdicts/{call_id}`."""
    job, separator, call_id = name.partition(f"/{VERDICT_COLLECTION}/")
    rule = f"must look like '{JOB_COLLECTION}/{{job_id}}/{VERDICT_COLLECTION}/{{call_id}}'"
    if not separator or not _CALL_ID.fullmatch(call_id):
        raise BadName(rule)
    try:
        return parse_job_name(job), call_id
    except BadName:
        raise BadName(rule) from None


def is_valid_tenant(tenant: str) -> bool:
    return _ID.fullmatch(tenant) is not None
