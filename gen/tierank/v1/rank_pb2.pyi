import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EnsembleMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENSEMBLE_MODE_UNSPECIFIED: _ClassVar[EnsembleMode]
    ENSEMBLE_MODE_ALL: _ClassVar[EnsembleMode]
    ENSEMBLE_MODE_ADAPTIVE: _ClassVar[EnsembleMode]

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_PENDING: _ClassVar[JobState]
    JOB_STATE_RUNNING: _ClassVar[JobState]
    JOB_STATE_SUCCEEDED: _ClassVar[JobState]
    JOB_STATE_FAILED: _ClassVar[JobState]
    JOB_STATE_CANCELLED: _ClassVar[JobState]

class CompletionReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMPLETION_REASON_UNSPECIFIED: _ClassVar[CompletionReason]
    COMPLETION_REASON_SETTLED: _ClassVar[CompletionReason]
    COMPLETION_REASON_BUDGET_EXHAUSTED: _ClassVar[CompletionReason]
    COMPLETION_REASON_CANCELLED: _ClassVar[CompletionReason]
    COMPLETION_REASON_JUDGES_UNAVAILABLE: _ClassVar[CompletionReason]
    COMPLETION_REASON_EXHAUSTED: _ClassVar[CompletionReason]
    COMPLETION_REASON_DEADLINE_EXCEEDED: _ClassVar[CompletionReason]
    COMPLETION_REASON_POSITION_BIASED: _ClassVar[CompletionReason]

class JobView(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_VIEW_UNSPECIFIED: _ClassVar[JobView]
    JOB_VIEW_BASIC: _ClassVar[JobView]
    JOB_VIEW_FULL: _ClassVar[JobView]
ENSEMBLE_MODE_UNSPECIFIED: EnsembleMode
ENSEMBLE_MODE_ALL: EnsembleMode
ENSEMBLE_MODE_ADAPTIVE: EnsembleMode
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_PENDING: JobState
JOB_STATE_RUNNING: JobState
JOB_STATE_SUCCEEDED: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_CANCELLED: JobState
COMPLETION_REASON_UNSPECIFIED: CompletionReason
COMPLETION_REASON_SETTLED: CompletionReason
COMPLETION_REASON_BUDGET_EXHAUSTED: CompletionReason
COMPLETION_REASON_CANCELLED: CompletionReason
COMPLETION_REASON_JUDGES_UNAVAILABLE: CompletionReason
COMPLETION_REASON_EXHAUSTED: CompletionReason
COMPLETION_REASON_DEADLINE_EXCEEDED: CompletionReason
COMPLETION_REASON_POSITION_BIASED: CompletionReason
JOB_VIEW_UNSPECIFIED: JobView
JOB_VIEW_BASIC: JobView
JOB_VIEW_FULL: JobView

class Candidate(_message.Message):
    __slots__ = ("id", "text", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    id: str
    text: str
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, id: _Optional[str] = ..., text: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class JudgeParameters(_message.Message):
    __slots__ = ("temperature", "max_output_tokens", "reasoning", "timeout_seconds", "passage_token_budget", "options")
    class OptionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REASONING_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PASSAGE_TOKEN_BUDGET_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    temperature: float
    max_output_tokens: int
    reasoning: bool
    timeout_seconds: float
    passage_token_budget: int
    options: _containers.ScalarMap[str, str]
    def __init__(self, temperature: _Optional[float] = ..., max_output_tokens: _Optional[int] = ..., reasoning: _Optional[bool] = ..., timeout_seconds: _Optional[float] = ..., passage_token_budget: _Optional[int] = ..., options: _Optional[_Mapping[str, str]] = ...) -> None: ...

class JudgeSpec(_message.Message):
    __slots__ = ("provider", "model", "weight", "parameters", "name", "weight_from_qualification", "qualification", "admitted_unqualified", "admission_note")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FROM_QUALIFICATION_FIELD_NUMBER: _ClassVar[int]
    QUALIFICATION_FIELD_NUMBER: _ClassVar[int]
    ADMITTED_UNQUALIFIED_FIELD_NUMBER: _ClassVar[int]
    ADMISSION_NOTE_FIELD_NUMBER: _ClassVar[int]
    provider: str
    model: str
    weight: float
    parameters: JudgeParameters
    name: str
    weight_from_qualification: bool
    qualification: str
    admitted_unqualified: bool
    admission_note: str
    def __init__(self, provider: _Optional[str] = ..., model: _Optional[str] = ..., weight: _Optional[float] = ..., parameters: _Optional[_Union[JudgeParameters, _Mapping]] = ..., name: _Optional[str] = ..., weight_from_qualification: _Optional[bool] = ..., qualification: _Optional[str] = ..., admitted_unqualified: _Optional[bool] = ..., admission_note: _Optional[str] = ...) -> None: ...

class Budget(_message.Message):
    __slots__ = ("max_judge_calls", "max_input_tokens", "max_cost_usd")
    MAX_JUDGE_CALLS_FIELD_NUMBER: _ClassVar[int]
    MAX_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_COST_USD_FIELD_NUMBER: _ClassVar[int]
    max_judge_calls: int
    max_input_tokens: int
    max_cost_usd: float
    def __init__(self, max_judge_calls: _Optional[int] = ..., max_input_tokens: _Optional[int] = ..., max_cost_usd: _Optional[float] = ...) -> None: ...

class JobSpec(_message.Message):
    __slots__ = ("query", "candidates", "rubric", "judges", "batch_size", "top_k", "budget", "max_in_flight", "seed", "ensemble_mode", "quorum", "deadline_seconds", "allow_unqualified_judges")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    RUBRIC_FIELD_NUMBER: _ClassVar[int]
    JUDGES_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    ENSEMBLE_MODE_FIELD_NUMBER: _ClassVar[int]
    QUORUM_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_UNQUALIFIED_JUDGES_FIELD_NUMBER: _ClassVar[int]
    query: str
    candidates: _containers.RepeatedCompositeFieldContainer[Candidate]
    rubric: str
    judges: _containers.RepeatedCompositeFieldContainer[JudgeSpec]
    batch_size: int
    top_k: int
    budget: Budget
    max_in_flight: int
    seed: int
    ensemble_mode: EnsembleMode
    quorum: int
    deadline_seconds: float
    allow_unqualified_judges: bool
    def __init__(self, query: _Optional[str] = ..., candidates: _Optional[_Iterable[_Union[Candidate, _Mapping]]] = ..., rubric: _Optional[str] = ..., judges: _Optional[_Iterable[_Union[JudgeSpec, _Mapping]]] = ..., batch_size: _Optional[int] = ..., top_k: _Optional[int] = ..., budget: _Optional[_Union[Budget, _Mapping]] = ..., max_in_flight: _Optional[int] = ..., seed: _Optional[int] = ..., ensemble_mode: _Optional[_Union[EnsembleMode, str]] = ..., quorum: _Optional[int] = ..., deadline_seconds: _Optional[float] = ..., allow_unqualified_judges: _Optional[bool] = ...) -> None: ...

class Tier(_message.Message):
    __slots__ = ("rank", "candidate_ids", "settled")
    RANK_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_IDS_FIELD_NUMBER: _ClassVar[int]
    SETTLED_FIELD_NUMBER: _ClassVar[int]
    rank: int
    candidate_ids: _containers.RepeatedScalarFieldContainer[str]
    settled: bool
    def __init__(self, rank: _Optional[int] = ..., candidate_ids: _Optional[_Iterable[str]] = ..., settled: _Optional[bool] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("input_tokens", "output_tokens", "cached_input_tokens", "cost_usd", "latency_seconds", "cache_write_input_tokens")
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    LATENCY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    cost_usd: float
    latency_seconds: float
    cache_write_input_tokens: int
    def __init__(self, input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., cached_input_tokens: _Optional[int] = ..., cost_usd: _Optional[float] = ..., latency_seconds: _Optional[float] = ..., cache_write_input_tokens: _Optional[int] = ...) -> None: ...

class JudgeStats(_message.Message):
    __slots__ = ("judge", "calls", "failed_calls", "cached_calls", "usage", "agreement_rate", "last_error", "breaker_open", "abandoned_calls", "admitted_unqualified", "admission_note", "position_bias")
    JUDGE_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    FAILED_CALLS_FIELD_NUMBER: _ClassVar[int]
    CACHED_CALLS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    AGREEMENT_RATE_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    BREAKER_OPEN_FIELD_NUMBER: _ClassVar[int]
    ABANDONED_CALLS_FIELD_NUMBER: _ClassVar[int]
    ADMITTED_UNQUALIFIED_FIELD_NUMBER: _ClassVar[int]
    ADMISSION_NOTE_FIELD_NUMBER: _ClassVar[int]
    POSITION_BIAS_FIELD_NUMBER: _ClassVar[int]
    judge: str
    calls: int
    failed_calls: int
    cached_calls: int
    usage: Usage
    agreement_rate: float
    last_error: str
    breaker_open: bool
    abandoned_calls: int
    admitted_unqualified: bool
    admission_note: str
    position_bias: PositionBias
    def __init__(self, judge: _Optional[str] = ..., calls: _Optional[int] = ..., failed_calls: _Optional[int] = ..., cached_calls: _Optional[int] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., agreement_rate: _Optional[float] = ..., last_error: _Optional[str] = ..., breaker_open: _Optional[bool] = ..., abandoned_calls: _Optional[int] = ..., admitted_unqualified: _Optional[bool] = ..., admission_note: _Optional[str] = ..., position_bias: _Optional[_Union[PositionBias, _Mapping]] = ...) -> None: ...

class PositionBias(_message.Message):
    __slots__ = ("verdicts", "mean_tau", "z", "biased", "first_pick_position", "first_pick_z")
    VERDICTS_FIELD_NUMBER: _ClassVar[int]
    MEAN_TAU_FIELD_NUMBER: _ClassVar[int]
    Z_FIELD_NUMBER: _ClassVar[int]
    BIASED_FIELD_NUMBER: _ClassVar[int]
    FIRST_PICK_POSITION_FIELD_NUMBER: _ClassVar[int]
    FIRST_PICK_Z_FIELD_NUMBER: _ClassVar[int]
    verdicts: int
    mean_tau: float
    z: float
    biased: bool
    first_pick_position: float
    first_pick_z: float
    def __init__(self, verdicts: _Optional[int] = ..., mean_tau: _Optional[float] = ..., z: _Optional[float] = ..., biased: _Optional[bool] = ..., first_pick_position: _Optional[float] = ..., first_pick_z: _Optional[float] = ...) -> None: ...

class JobStats(_message.Message):
    __slots__ = ("judge_calls", "cached_calls", "failed_calls", "input_tokens", "output_tokens", "cached_input_tokens", "cost_usd", "critical_path", "judges", "wall_seconds", "settled_count", "total_count", "abandoned_calls", "cache_write_input_tokens")
    JUDGE_CALLS_FIELD_NUMBER: _ClassVar[int]
    CACHED_CALLS_FIELD_NUMBER: _ClassVar[int]
    FAILED_CALLS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    CRITICAL_PATH_FIELD_NUMBER: _ClassVar[int]
    JUDGES_FIELD_NUMBER: _ClassVar[int]
    WALL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SETTLED_COUNT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_COUNT_FIELD_NUMBER: _ClassVar[int]
    ABANDONED_CALLS_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    judge_calls: int
    cached_calls: int
    failed_calls: int
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    cost_usd: float
    critical_path: int
    judges: _containers.RepeatedCompositeFieldContainer[JudgeStats]
    wall_seconds: float
    settled_count: int
    total_count: int
    abandoned_calls: int
    cache_write_input_tokens: int
    def __init__(self, judge_calls: _Optional[int] = ..., cached_calls: _Optional[int] = ..., failed_calls: _Optional[int] = ..., input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., cached_input_tokens: _Optional[int] = ..., cost_usd: _Optional[float] = ..., critical_path: _Optional[int] = ..., judges: _Optional[_Iterable[_Union[JudgeStats, _Mapping]]] = ..., wall_seconds: _Optional[float] = ..., settled_count: _Optional[int] = ..., total_count: _Optional[int] = ..., abandoned_calls: _Optional[int] = ..., cache_write_input_tokens: _Optional[int] = ...) -> None: ...

class JobError(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("name", "request_id", "state", "spec", "create_time", "update_time", "tiers", "stats", "completion_reason", "error", "last_sequence", "query", "candidate_count", "trace_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    TIERS_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_COUNT_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    request_id: str
    state: JobState
    spec: JobSpec
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    tiers: _containers.RepeatedCompositeFieldContainer[Tier]
    stats: JobStats
    completion_reason: CompletionReason
    error: JobError
    last_sequence: int
    query: str
    candidate_count: int
    trace_id: str
    def __init__(self, name: _Optional[str] = ..., request_id: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., spec: _Optional[_Union[JobSpec, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., tiers: _Optional[_Iterable[_Union[Tier, _Mapping]]] = ..., stats: _Optional[_Union[JobStats, _Mapping]] = ..., completion_reason: _Optional[_Union[CompletionReason, str]] = ..., error: _Optional[_Union[JobError, _Mapping]] = ..., last_sequence: _Optional[int] = ..., query: _Optional[str] = ..., candidate_count: _Optional[int] = ..., trace_id: _Optional[str] = ...) -> None: ...

class JobAccepted(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class VerdictReceived(_message.Message):
    __slots__ = ("call_id", "batch", "judge", "presented", "ordering", "usage", "cached", "failed", "failure_reason")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    JUDGE_FIELD_NUMBER: _ClassVar[int]
    PRESENTED_FIELD_NUMBER: _ClassVar[int]
    ORDERING_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    FAILURE_REASON_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    batch: int
    judge: str
    presented: _containers.RepeatedScalarFieldContainer[str]
    ordering: _containers.RepeatedScalarFieldContainer[str]
    usage: Usage
    cached: bool
    failed: bool
    failure_reason: str
    def __init__(self, call_id: _Optional[str] = ..., batch: _Optional[int] = ..., judge: _Optional[str] = ..., presented: _Optional[_Iterable[str]] = ..., ordering: _Optional[_Iterable[str]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., cached: _Optional[bool] = ..., failed: _Optional[bool] = ..., failure_reason: _Optional[str] = ...) -> None: ...

class TiersUpdated(_message.Message):
    __slots__ = ("tiers", "settled_count", "total_count", "stats")
    TIERS_FIELD_NUMBER: _ClassVar[int]
    SETTLED_COUNT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_COUNT_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    tiers: _containers.RepeatedCompositeFieldContainer[Tier]
    settled_count: int
    total_count: int
    stats: JobStats
    def __init__(self, tiers: _Optional[_Iterable[_Union[Tier, _Mapping]]] = ..., settled_count: _Optional[int] = ..., total_count: _Optional[int] = ..., stats: _Optional[_Union[JobStats, _Mapping]] = ...) -> None: ...

class JobCompleted(_message.Message):
    __slots__ = ("tiers", "stats", "reason")
    TIERS_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    tiers: _containers.RepeatedCompositeFieldContainer[Tier]
    stats: JobStats
    reason: CompletionReason
    def __init__(self, tiers: _Optional[_Iterable[_Union[Tier, _Mapping]]] = ..., stats: _Optional[_Union[JobStats, _Mapping]] = ..., reason: _Optional[_Union[CompletionReason, str]] = ...) -> None: ...

class JobFailed(_message.Message):
    __slots__ = ("error", "stats")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    error: JobError
    stats: JobStats
    def __init__(self, error: _Optional[_Union[JobError, _Mapping]] = ..., stats: _Optional[_Union[JobStats, _Mapping]] = ...) -> None: ...

class JudgeStalled(_message.Message):
    __slots__ = ("judge", "waiting_seconds", "median_latency_seconds", "time_limit_seconds")
    JUDGE_FIELD_NUMBER: _ClassVar[int]
    WAITING_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MEDIAN_LATENCY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TIME_LIMIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    judge: str
    waiting_seconds: float
    median_latency_seconds: float
    time_limit_seconds: float
    def __init__(self, judge: _Optional[str] = ..., waiting_seconds: _Optional[float] = ..., median_latency_seconds: _Optional[float] = ..., time_limit_seconds: _Optional[float] = ...) -> None: ...

class JobEvent(_message.Message):
    __slots__ = ("job", "sequence", "time", "accepted", "verdict", "tiers_updated", "completed", "failed", "judge_stalled")
    JOB_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    TIERS_UPDATED_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    JUDGE_STALLED_FIELD_NUMBER: _ClassVar[int]
    job: str
    sequence: int
    time: _timestamp_pb2.Timestamp
    accepted: JobAccepted
    verdict: VerdictReceived
    tiers_updated: TiersUpdated
    completed: JobCompleted
    failed: JobFailed
    judge_stalled: JudgeStalled
    def __init__(self, job: _Optional[str] = ..., sequence: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., accepted: _Optional[_Union[JobAccepted, _Mapping]] = ..., verdict: _Optional[_Union[VerdictReceived, _Mapping]] = ..., tiers_updated: _Optional[_Union[TiersUpdated, _Mapping]] = ..., completed: _Optional[_Union[JobCompleted, _Mapping]] = ..., failed: _Optional[_Union[JobFailed, _Mapping]] = ..., judge_stalled: _Optional[_Union[JudgeStalled, _Mapping]] = ...) -> None: ...

class CreateJobRequest(_message.Message):
    __slots__ = ("spec", "request_id", "view")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    spec: JobSpec
    request_id: str
    view: JobView
    def __init__(self, spec: _Optional[_Union[JobSpec, _Mapping]] = ..., request_id: _Optional[str] = ..., view: _Optional[_Union[JobView, str]] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("name", "view")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    name: str
    view: JobView
    def __init__(self, name: _Optional[str] = ..., view: _Optional[_Union[JobView, str]] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "state", "view")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    state: JobState
    view: JobView
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., view: _Optional[_Union[JobView, str]] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class WatchJobRequest(_message.Message):
    __slots__ = ("name", "after_sequence")
    NAME_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    after_sequence: int
    def __init__(self, name: _Optional[str] = ..., after_sequence: _Optional[int] = ...) -> None: ...

class GetVerdictRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class VerdictRecord(_message.Message):
    __slots__ = ("name", "verdict", "prompt", "raw_answer")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    RAW_ANSWER_FIELD_NUMBER: _ClassVar[int]
    name: str
    verdict: VerdictReceived
    prompt: str
    raw_answer: str
    def __init__(self, name: _Optional[str] = ..., verdict: _Optional[_Union[VerdictReceived, _Mapping]] = ..., prompt: _Optional[str] = ..., raw_answer: _Optional[str] = ...) -> None: ...

class RankRequest(_message.Message):
    __slots__ = ("spec", "request_id")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    spec: JobSpec
    request_id: str
    def __init__(self, spec: _Optional[_Union[JobSpec, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...
