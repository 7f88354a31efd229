import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from tierank.v1 import eval_pb2 as _eval_pb2
from tierank.v1 import rank_pb2 as _rank_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StudyState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STUDY_STATE_UNSPECIFIED: _ClassVar[StudyState]
    STUDY_STATE_DRAFT: _ClassVar[StudyState]
    STUDY_STATE_RUNNING: _ClassVar[StudyState]
    STUDY_STATE_SUCCEEDED: _ClassVar[StudyState]
    STUDY_STATE_FAILED: _ClassVar[StudyState]
    STUDY_STATE_CANCELLED: _ClassVar[StudyState]

class ProviderBatchState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROVIDER_BATCH_STATE_UNSPECIFIED: _ClassVar[ProviderBatchState]
    PROVIDER_BATCH_STATE_SUBMITTING: _ClassVar[ProviderBatchState]
    PROVIDER_BATCH_STATE_OPEN: _ClassVar[ProviderBatchState]
    PROVIDER_BATCH_STATE_ENDED: _ClassVar[ProviderBatchState]
    PROVIDER_BATCH_STATE_FAILED: _ClassVar[ProviderBatchState]
STUDY_STATE_UNSPECIFIED: StudyState
STUDY_STATE_DRAFT: StudyState
STUDY_STATE_RUNNING: StudyState
STUDY_STATE_SUCCEEDED: StudyState
STUDY_STATE_FAILED: StudyState
STUDY_STATE_CANCELLED: StudyState
PROVIDER_BATCH_STATE_UNSPECIFIED: ProviderBatchState
PROVIDER_BATCH_STATE_SUBMITTING: ProviderBatchState
PROVIDER_BATCH_STATE_OPEN: ProviderBatchState
PROVIDER_BATCH_STATE_ENDED: ProviderBatchState
PROVIDER_BATCH_STATE_FAILED: ProviderBatchState

class StudySpec(_message.Message):
    __slots__ = ("display_name", "depth", "ranking", "budget", "deadline_seconds", "labels", "measures", "max_live_queries", "provider_batch")
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    RANKING_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    MEASURES_FIELD_NUMBER: _ClassVar[int]
    MAX_LIVE_QUERIES_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_BATCH_FIELD_NUMBER: _ClassVar[int]
    display_name: str
    depth: int
    ranking: _rank_pb2.JobSpec
    budget: _rank_pb2.Budget
    deadline_seconds: float
    labels: _eval_pb2.TierMapping
    measures: _containers.RepeatedScalarFieldContainer[str]
    max_live_queries: int
    provider_batch: bool
    def __init__(self, display_name: _Optional[str] = ..., depth: _Optional[int] = ..., ranking: _Optional[_Union[_rank_pb2.JobSpec, _Mapping]] = ..., budget: _Optional[_Union[_rank_pb2.Budget, _Mapping]] = ..., deadline_seconds: _Optional[float] = ..., labels: _Optional[_Union[_eval_pb2.TierMapping, _Mapping]] = ..., measures: _Optional[_Iterable[str]] = ..., max_live_queries: _Optional[int] = ..., provider_batch: _Optional[bool] = ...) -> None: ...

class StudyTopic(_message.Message):
    __slots__ = ("query_id", "text")
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    query_id: str
    text: str
    def __init__(self, query_id: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class RunEntry(_message.Message):
    __slots__ = ("query_id", "doc_id", "score")
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    query_id: str
    doc_id: str
    score: float
    def __init__(self, query_id: _Optional[str] = ..., doc_id: _Optional[str] = ..., score: _Optional[float] = ...) -> None: ...

class StudyRunChunk(_message.Message):
    __slots__ = ("system", "entries")
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    system: str
    entries: _containers.RepeatedCompositeFieldContainer[RunEntry]
    def __init__(self, system: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[RunEntry, _Mapping]]] = ...) -> None: ...

class StudyPassage(_message.Message):
    __slots__ = ("doc_id", "text", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    doc_id: str
    text: str
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, doc_id: _Optional[str] = ..., text: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class HumanJudgment(_message.Message):
    __slots__ = ("query_id", "doc_id", "grade")
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    GRADE_FIELD_NUMBER: _ClassVar[int]
    query_id: str
    doc_id: str
    grade: int
    def __init__(self, query_id: _Optional[str] = ..., doc_id: _Optional[str] = ..., grade: _Optional[int] = ...) -> None: ...

class AddStudyInputsRequest(_message.Message):
    __slots__ = ("study", "request_id", "topics", "runs", "passages", "human_qrels", "human_sample")
    STUDY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    PASSAGES_FIELD_NUMBER: _ClassVar[int]
    HUMAN_QRELS_FIELD_NUMBER: _ClassVar[int]
    HUMAN_SAMPLE_FIELD_NUMBER: _ClassVar[int]
    study: str
    request_id: str
    topics: _containers.RepeatedCompositeFieldContainer[StudyTopic]
    runs: _containers.RepeatedCompositeFieldContainer[StudyRunChunk]
    passages: _containers.RepeatedCompositeFieldContainer[StudyPassage]
    human_qrels: _containers.RepeatedCompositeFieldContainer[HumanJudgment]
    human_sample: _containers.RepeatedCompositeFieldContainer[HumanJudgment]
    def __init__(self, study: _Optional[str] = ..., request_id: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[StudyTopic, _Mapping]]] = ..., runs: _Optional[_Iterable[_Union[StudyRunChunk, _Mapping]]] = ..., passages: _Optional[_Iterable[_Union[StudyPassage, _Mapping]]] = ..., human_qrels: _Optional[_Iterable[_Union[HumanJudgment, _Mapping]]] = ..., human_sample: _Optional[_Iterable[_Union[HumanJudgment, _Mapping]]] = ...) -> None: ...

class AddStudyInputsResponse(_message.Message):
    __slots__ = ("study", "added")
    STUDY_FIELD_NUMBER: _ClassVar[int]
    ADDED_FIELD_NUMBER: _ClassVar[int]
    study: Study
    added: bool
    def __init__(self, study: _Optional[_Union[Study, _Mapping]] = ..., added: _Optional[bool] = ...) -> None: ...

class StudyInputs(_message.Message):
    __slots__ = ("topics", "systems", "run_entries", "passages", "human_judgments", "chunks", "rounds", "human_sample_judgments")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    SYSTEMS_FIELD_NUMBER: _ClassVar[int]
    RUN_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    PASSAGES_FIELD_NUMBER: _ClassVar[int]
    HUMAN_JUDGMENTS_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    ROUNDS_FIELD_NUMBER: _ClassVar[int]
    HUMAN_SAMPLE_JUDGMENTS_FIELD_NUMBER: _ClassVar[int]
    topics: int
    systems: _containers.RepeatedScalarFieldContainer[str]
    run_entries: int
    passages: int
    human_judgments: int
    chunks: int
    rounds: _containers.RepeatedCompositeFieldContainer[StudyRound]
    human_sample_judgments: int
    def __init__(self, topics: _Optional[int] = ..., systems: _Optional[_Iterable[str]] = ..., run_entries: _Optional[int] = ..., passages: _Optional[int] = ..., human_judgments: _Optional[int] = ..., chunks: _Optional[int] = ..., rounds: _Optional[_Iterable[_Union[StudyRound, _Mapping]]] = ..., human_sample_judgments: _Optional[int] = ...) -> None: ...

class StudyRound(_message.Message):
    __slots__ = ("round", "systems", "start_time", "request_id", "queries_extended", "documents_added", "judged_before")
    class JudgedBeforeEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    ROUND_FIELD_NUMBER: _ClassVar[int]
    SYSTEMS_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    QUERIES_EXTENDED_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_ADDED_FIELD_NUMBER: _ClassVar[int]
    JUDGED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    round: int
    systems: _containers.RepeatedScalarFieldContainer[str]
    start_time: _timestamp_pb2.Timestamp
    request_id: str
    queries_extended: int
    documents_added: int
    judged_before: _containers.ScalarMap[str, float]
    def __init__(self, round: _Optional[int] = ..., systems: _Optional[_Iterable[str]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., request_id: _Optional[str] = ..., queries_extended: _Optional[int] = ..., documents_added: _Optional[int] = ..., judged_before: _Optional[_Mapping[str, float]] = ...) -> None: ...

class StudyProgress(_message.Message):
    __slots__ = ("queries", "pending", "running", "settled", "provisional", "failed", "judge_calls", "usage", "critical_path", "eta_seconds", "pooled_documents", "grading", "pointwise_calls", "pointwise_usage")
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    SETTLED_FIELD_NUMBER: _ClassVar[int]
    PROVISIONAL_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    JUDGE_CALLS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    CRITICAL_PATH_FIELD_NUMBER: _ClassVar[int]
    ETA_SECONDS_FIELD_NUMBER: _ClassVar[int]
    POOLED_DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    GRADING_FIELD_NUMBER: _ClassVar[int]
    POINTWISE_CALLS_FIELD_NUMBER: _ClassVar[int]
    POINTWISE_USAGE_FIELD_NUMBER: _ClassVar[int]
    queries: int
    pending: int
    running: int
    settled: int
    provisional: int
    failed: int
    judge_calls: int
    usage: _rank_pb2.Usage
    critical_path: int
    eta_seconds: float
    pooled_documents: int
    grading: int
    pointwise_calls: int
    pointwise_usage: _rank_pb2.Usage
    def __init__(self, queries: _Optional[int] = ..., pending: _Optional[int] = ..., running: _Optional[int] = ..., settled: _Optional[int] = ..., provisional: _Optional[int] = ..., failed: _Optional[int] = ..., judge_calls: _Optional[int] = ..., usage: _Optional[_Union[_rank_pb2.Usage, _Mapping]] = ..., critical_path: _Optional[int] = ..., eta_seconds: _Optional[float] = ..., pooled_documents: _Optional[int] = ..., grading: _Optional[int] = ..., pointwise_calls: _Optional[int] = ..., pointwise_usage: _Optional[_Union[_rank_pb2.Usage, _Mapping]] = ...) -> None: ...

class Study(_message.Message):
    __slots__ = ("name", "request_id", "spec", "state", "create_time", "update_time", "start_time", "end_time", "inputs", "progress", "error", "trace_id", "provider_batches", "pause")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_BATCHES_FIELD_NUMBER: _ClassVar[int]
    PAUSE_FIELD_NUMBER: _ClassVar[int]
    name: str
    request_id: str
    spec: StudySpec
    state: StudyState
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    inputs: StudyInputs
    progress: StudyProgress
    error: _rank_pb2.JobError
    trace_id: str
    provider_batches: _containers.RepeatedCompositeFieldContainer[ProviderBatch]
    pause: StudyPause
    def __init__(self, name: _Optional[str] = ..., request_id: _Optional[str] = ..., spec: _Optional[_Union[StudySpec, _Mapping]] = ..., state: _Optional[_Union[StudyState, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., inputs: _Optional[_Union[StudyInputs, _Mapping]] = ..., progress: _Optional[_Union[StudyProgress, _Mapping]] = ..., error: _Optional[_Union[_rank_pb2.JobError, _Mapping]] = ..., trace_id: _Optional[str] = ..., provider_batches: _Optional[_Iterable[_Union[ProviderBatch, _Mapping]]] = ..., pause: _Optional[_Union[StudyPause, _Mapping]] = ...) -> None: ...

class StudyPause(_message.Message):
    __slots__ = ("reason", "since")
    REASON_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    reason: str
    since: _timestamp_pb2.Timestamp
    def __init__(self, reason: _Optional[str] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ProviderBatch(_message.Message):
    __slots__ = ("provider", "model", "state", "vendor_id", "vendor_status", "calls", "vendor_counts", "create_time", "submit_time", "end_time", "message")
    class VendorCountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    VENDOR_ID_FIELD_NUMBER: _ClassVar[int]
    VENDOR_STATUS_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    VENDOR_COUNTS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    provider: str
    model: str
    state: ProviderBatchState
    vendor_id: str
    vendor_status: str
    calls: int
    vendor_counts: _containers.ScalarMap[str, int]
    create_time: _timestamp_pb2.Timestamp
    submit_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    message: str
    def __init__(self, provider: _Optional[str] = ..., model: _Optional[str] = ..., state: _Optional[_Union[ProviderBatchState, str]] = ..., vendor_id: _Optional[str] = ..., vendor_status: _Optional[str] = ..., calls: _Optional[int] = ..., vendor_counts: _Optional[_Mapping[str, int]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., submit_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., message: _Optional[str] = ...) -> None: ...

class CreateStudyRequest(_message.Message):
    __slots__ = ("spec", "request_id")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    spec: StudySpec
    request_id: str
    def __init__(self, spec: _Optional[_Union[StudySpec, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class StartStudyRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ExtendStudyRequest(_message.Message):
    __slots__ = ("name", "request_id", "budget", "deadline_seconds", "systems")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SYSTEMS_FIELD_NUMBER: _ClassVar[int]
    name: str
    request_id: str
    budget: _rank_pb2.Budget
    deadline_seconds: float
    systems: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., request_id: _Optional[str] = ..., budget: _Optional[_Union[_rank_pb2.Budget, _Mapping]] = ..., deadline_seconds: _Optional[float] = ..., systems: _Optional[_Iterable[str]] = ...) -> None: ...

class GetStudyRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListStudiesRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListStudiesResponse(_message.Message):
    __slots__ = ("studies", "next_page_token")
    STUDIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    studies: _containers.RepeatedCompositeFieldContainer[Study]
    next_page_token: str
    def __init__(self, studies: _Optional[_Iterable[_Union[Study, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelStudyRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class WatchStudyRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetStudyReportRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class CalibrateStudyRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class MeasureInterval(_message.Message):
    __slots__ = ("measure", "mean", "low", "high", "count", "study_mean")
    MEASURE_FIELD_NUMBER: _ClassVar[int]
    MEAN_FIELD_NUMBER: _ClassVar[int]
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    STUDY_MEAN_FIELD_NUMBER: _ClassVar[int]
    measure: str
    mean: float
    low: float
    high: float
    count: int
    study_mean: float
    def __init__(self, measure: _Optional[str] = ..., mean: _Optional[float] = ..., low: _Optional[float] = ..., high: _Optional[float] = ..., count: _Optional[int] = ..., study_mean: _Optional[float] = ...) -> None: ...

class SystemResult(_message.Message):
    __slots__ = ("system", "measures")
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    MEASURES_FIELD_NUMBER: _ClassVar[int]
    system: str
    measures: _containers.RepeatedCompositeFieldContainer[MeasureInterval]
    def __init__(self, system: _Optional[str] = ..., measures: _Optional[_Iterable[_Union[MeasureInterval, _Mapping]]] = ...) -> None: ...

class SystemComparison(_message.Message):
    __slots__ = ("better", "worse", "measure", "difference", "low", "high", "p_value", "distinguishable", "queries", "p_value_adjusted")
    BETTER_FIELD_NUMBER: _ClassVar[int]
    WORSE_FIELD_NUMBER: _ClassVar[int]
    MEASURE_FIELD_NUMBER: _ClassVar[int]
    DIFFERENCE_FIELD_NUMBER: _ClassVar[int]
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    P_VALUE_FIELD_NUMBER: _ClassVar[int]
    DISTINGUISHABLE_FIELD_NUMBER: _ClassVar[int]
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    P_VALUE_ADJUSTED_FIELD_NUMBER: _ClassVar[int]
    better: str
    worse: str
    measure: str
    difference: float
    low: float
    high: float
    p_value: float
    distinguishable: bool
    queries: int
    p_value_adjusted: float
    def __init__(self, better: _Optional[str] = ..., worse: _Optional[str] = ..., measure: _Optional[str] = ..., difference: _Optional[float] = ..., low: _Optional[float] = ..., high: _Optional[float] = ..., p_value: _Optional[float] = ..., distinguishable: _Optional[bool] = ..., queries: _Optional[int] = ..., p_value_adjusted: _Optional[float] = ...) -> None: ...

class LabelAgreement(_message.Message):
    __slots__ = ("pairs", "kappa", "weighted_kappa", "confusion", "kendall_tau", "rbo", "human_ranking", "human_results")
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    KAPPA_FIELD_NUMBER: _ClassVar[int]
    WEIGHTED_KAPPA_FIELD_NUMBER: _ClassVar[int]
    CONFUSION_FIELD_NUMBER: _ClassVar[int]
    KENDALL_TAU_FIELD_NUMBER: _ClassVar[int]
    RBO_FIELD_NUMBER: _ClassVar[int]
    HUMAN_RANKING_FIELD_NUMBER: _ClassVar[int]
    HUMAN_RESULTS_FIELD_NUMBER: _ClassVar[int]
    pairs: int
    kappa: float
    weighted_kappa: float
    confusion: _eval_pb2.ConfusionMatrix
    kendall_tau: float
    rbo: float
    human_ranking: _containers.RepeatedScalarFieldContainer[str]
    human_results: _containers.RepeatedCompositeFieldContainer[SystemResult]
    def __init__(self, pairs: _Optional[int] = ..., kappa: _Optional[float] = ..., weighted_kappa: _Optional[float] = ..., confusion: _Optional[_Union[_eval_pb2.ConfusionMatrix, _Mapping]] = ..., kendall_tau: _Optional[float] = ..., rbo: _Optional[float] = ..., human_ranking: _Optional[_Iterable[str]] = ..., human_results: _Optional[_Iterable[_Union[SystemResult, _Mapping]]] = ...) -> None: ...

class StudyCost(_message.Message):
    __slots__ = ("judge_calls", "usage", "critical_path", "wall_seconds", "pointwise_calls", "pointwise_usage")
    JUDGE_CALLS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    CRITICAL_PATH_FIELD_NUMBER: _ClassVar[int]
    WALL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    POINTWISE_CALLS_FIELD_NUMBER: _ClassVar[int]
    POINTWISE_USAGE_FIELD_NUMBER: _ClassVar[int]
    judge_calls: int
    usage: _rank_pb2.Usage
    critical_path: int
    wall_seconds: float
    pointwise_calls: int
    pointwise_usage: _rank_pb2.Usage
    def __init__(self, judge_calls: _Optional[int] = ..., usage: _Optional[_Union[_rank_pb2.Usage, _Mapping]] = ..., critical_path: _Optional[int] = ..., wall_seconds: _Optional[float] = ..., pointwise_calls: _Optional[int] = ..., pointwise_usage: _Optional[_Union[_rank_pb2.Usage, _Mapping]] = ...) -> None: ...

class SampleAgreement(_message.Message):
    __slots__ = ("queries", "judgments", "outside_pool", "pairs", "kappa", "weighted_kappa", "confusion", "grades", "grader_noise", "grader_offsets")
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    JUDGMENTS_FIELD_NUMBER: _ClassVar[int]
    OUTSIDE_POOL_FIELD_NUMBER: _ClassVar[int]
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    KAPPA_FIELD_NUMBER: _ClassVar[int]
    WEIGHTED_KAPPA_FIELD_NUMBER: _ClassVar[int]
    CONFUSION_FIELD_NUMBER: _ClassVar[int]
    GRADES_FIELD_NUMBER: _ClassVar[int]
    GRADER_NOISE_FIELD_NUMBER: _ClassVar[int]
    GRADER_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    queries: int
    judgments: int
    outside_pool: int
    pairs: int
    kappa: float
    weighted_kappa: float
    confusion: _eval_pb2.ConfusionMatrix
    grades: _containers.RepeatedCompositeFieldContainer[GradeAgreement]
    grader_noise: float
    grader_offsets: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, queries: _Optional[int] = ..., judgments: _Optional[int] = ..., outside_pool: _Optional[int] = ..., pairs: _Optional[int] = ..., kappa: _Optional[float] = ..., weighted_kappa: _Optional[float] = ..., confusion: _Optional[_Union[_eval_pb2.ConfusionMatrix, _Mapping]] = ..., grades: _Optional[_Iterable[_Union[GradeAgreement, _Mapping]]] = ..., grader_noise: _Optional[float] = ..., grader_offsets: _Optional[_Iterable[float]] = ...) -> None: ...

class GradeAgreement(_message.Message):
    __slots__ = ("grade", "count", "agreement")
    GRADE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    AGREEMENT_FIELD_NUMBER: _ClassVar[int]
    grade: int
    count: int
    agreement: float
    def __init__(self, grade: _Optional[int] = ..., count: _Optional[int] = ..., agreement: _Optional[float] = ...) -> None: ...

class LabelModel(_message.Message):
    __slots__ = ("start", "steps", "emission", "noise", "offsets")
    START_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    EMISSION_FIELD_NUMBER: _ClassVar[int]
    NOISE_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    start: _containers.RepeatedScalarFieldContainer[float]
    steps: _containers.RepeatedScalarFieldContainer[float]
    emission: _containers.RepeatedScalarFieldContainer[float]
    noise: float
    offsets: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, start: _Optional[_Iterable[float]] = ..., steps: _Optional[_Iterable[float]] = ..., emission: _Optional[_Iterable[float]] = ..., noise: _Optional[float] = ..., offsets: _Optional[_Iterable[float]] = ...) -> None: ...

class StudyReport(_message.Message):
    __slots__ = ("study", "state", "complete", "progress", "primary_measure", "confidence", "systems", "ranking", "comparisons", "agreement", "cost", "labels", "queries", "judged", "interval_method", "pairs", "sample", "label_model", "judged_queries", "unjudged_queries", "warnings", "unqualified_judges")
    STUDY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_MEASURE_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    SYSTEMS_FIELD_NUMBER: _ClassVar[int]
    RANKING_FIELD_NUMBER: _ClassVar[int]
    COMPARISONS_FIELD_NUMBER: _ClassVar[int]
    AGREEMENT_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    JUDGED_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_METHOD_FIELD_NUMBER: _ClassVar[int]
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_FIELD_NUMBER: _ClassVar[int]
    LABEL_MODEL_FIELD_NUMBER: _ClassVar[int]
    JUDGED_QUERIES_FIELD_NUMBER: _ClassVar[int]
    UNJUDGED_QUERIES_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    UNQUALIFIED_JUDGES_FIELD_NUMBER: _ClassVar[int]
    study: str
    state: StudyState
    complete: bool
    progress: StudyProgress
    primary_measure: str
    confidence: float
    systems: _containers.RepeatedCompositeFieldContainer[SystemResult]
    ranking: _containers.RepeatedScalarFieldContainer[str]
    comparisons: _containers.RepeatedCompositeFieldContainer[SystemComparison]
    agreement: LabelAgreement
    cost: StudyCost
    labels: str
    queries: _containers.RepeatedCompositeFieldContainer[StudyQuery]
    judged: _containers.RepeatedCompositeFieldContainer[SystemJudged]
    interval_method: str
    pairs: _containers.RepeatedCompositeFieldContainer[SystemComparison]
    sample: SampleAgreement
    label_model: LabelModel
    judged_queries: int
    unjudged_queries: int
    warnings: _containers.RepeatedScalarFieldContainer[str]
    unqualified_judges: _containers.RepeatedCompositeFieldContainer[UnqualifiedJudge]
    def __init__(self, study: _Optional[str] = ..., state: _Optional[_Union[StudyState, str]] = ..., complete: _Optional[bool] = ..., progress: _Optional[_Union[StudyProgress, _Mapping]] = ..., primary_measure: _Optional[str] = ..., confidence: _Optional[float] = ..., systems: _Optional[_Iterable[_Union[SystemResult, _Mapping]]] = ..., ranking: _Optional[_Iterable[str]] = ..., comparisons: _Optional[_Iterable[_Union[SystemComparison, _Mapping]]] = ..., agreement: _Optional[_Union[LabelAgreement, _Mapping]] = ..., cost: _Optional[_Union[StudyCost, _Mapping]] = ..., labels: _Optional[str] = ..., queries: _Optional[_Iterable[_Union[StudyQuery, _Mapping]]] = ..., judged: _Optional[_Iterable[_Union[SystemJudged, _Mapping]]] = ..., interval_method: _Optional[str] = ..., pairs: _Optional[_Iterable[_Union[SystemComparison, _Mapping]]] = ..., sample: _Optional[_Union[SampleAgreement, _Mapping]] = ..., label_model: _Optional[_Union[LabelModel, _Mapping]] = ..., judged_queries: _Optional[int] = ..., unjudged_queries: _Optional[int] = ..., warnings: _Optional[_Iterable[str]] = ..., unqualified_judges: _Optional[_Iterable[_Union[UnqualifiedJudge, _Mapping]]] = ...) -> None: ...

class UnqualifiedJudge(_message.Message):
    __slots__ = ("judge", "note", "queries")
    JUDGE_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    judge: str
    note: str
    queries: int
    def __init__(self, judge: _Optional[str] = ..., note: _Optional[str] = ..., queries: _Optional[int] = ...) -> None: ...

class SystemJudged(_message.Message):
    __slots__ = ("system", "round", "before", "after", "documents_added")
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_ADDED_FIELD_NUMBER: _ClassVar[int]
    system: str
    round: int
    before: float
    after: float
    documents_added: int
    def __init__(self, system: _Optional[str] = ..., round: _Optional[int] = ..., before: _Optional[float] = ..., after: _Optional[float] = ..., documents_added: _Optional[int] = ...) -> None: ...

class ListStudyQueriesRequest(_message.Message):
    __slots__ = ("name", "page_size", "page_token")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    name: str
    page_size: int
    page_token: str
    def __init__(self, name: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class QueryMeasure(_message.Message):
    __slots__ = ("system", "measure", "value")
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    MEASURE_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    system: str
    measure: str
    value: float
    def __init__(self, system: _Optional[str] = ..., measure: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...

class StudyQuery(_message.Message):
    __slots__ = ("query_id", "job", "state", "completion_reason", "pool_size", "judge_calls", "usage", "critical_path", "wall_seconds", "measures", "probes", "pointwise_calls", "pointwise_usage", "human_labels")
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_REASON_FIELD_NUMBER: _ClassVar[int]
    POOL_SIZE_FIELD_NUMBER: _ClassVar[int]
    JUDGE_CALLS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    CRITICAL_PATH_FIELD_NUMBER: _ClassVar[int]
    WALL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MEASURES_FIELD_NUMBER: _ClassVar[int]
    PROBES_FIELD_NUMBER: _ClassVar[int]
    POINTWISE_CALLS_FIELD_NUMBER: _ClassVar[int]
    POINTWISE_USAGE_FIELD_NUMBER: _ClassVar[int]
    HUMAN_LABELS_FIELD_NUMBER: _ClassVar[int]
    query_id: str
    job: str
    state: _rank_pb2.JobState
    completion_reason: _rank_pb2.CompletionReason
    pool_size: int
    judge_calls: int
    usage: _rank_pb2.Usage
    critical_path: int
    wall_seconds: float
    measures: _containers.RepeatedCompositeFieldContainer[QueryMeasure]
    probes: _containers.RepeatedCompositeFieldContainer[PointwiseProbe]
    pointwise_calls: int
    pointwise_usage: _rank_pb2.Usage
    human_labels: bool
    def __init__(self, query_id: _Optional[str] = ..., job: _Optional[str] = ..., state: _Optional[_Union[_rank_pb2.JobState, str]] = ..., completion_reason: _Optional[_Union[_rank_pb2.CompletionReason, str]] = ..., pool_size: _Optional[int] = ..., judge_calls: _Optional[int] = ..., usage: _Optional[_Union[_rank_pb2.Usage, _Mapping]] = ..., critical_path: _Optional[int] = ..., wall_seconds: _Optional[float] = ..., measures: _Optional[_Iterable[_Union[QueryMeasure, _Mapping]]] = ..., probes: _Optional[_Iterable[_Union[PointwiseProbe, _Mapping]]] = ..., pointwise_calls: _Optional[int] = ..., pointwise_usage: _Optional[_Union[_rank_pb2.Usage, _Mapping]] = ..., human_labels: _Optional[bool] = ...) -> None: ...

class PointwiseProbe(_message.Message):
    __slots__ = ("doc_id", "grade")
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    GRADE_FIELD_NUMBER: _ClassVar[int]
    doc_id: str
    grade: int
    def __init__(self, doc_id: _Optional[str] = ..., grade: _Optional[int] = ...) -> None: ...

class ListStudyQueriesResponse(_message.Message):
    __slots__ = ("queries", "next_page_token")
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    queries: _containers.RepeatedCompositeFieldContainer[StudyQuery]
    next_page_token: str
    def __init__(self, queries: _Optional[_Iterable[_Union[StudyQuery, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ExportStudyQrelsRequest(_message.Message):
    __slots__ = ("name", "page_size", "page_token")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    name: str
    page_size: int
    page_token: str
    def __init__(self, name: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ExportStudyQrelsResponse(_message.Message):
    __slots__ = ("qrels", "next_page_token")
    QRELS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    qrels: str
    next_page_token: str
    def __init__(self, qrels: _Optional[str] = ..., next_page_token: _Optional[str] = ...) -> None: ...
