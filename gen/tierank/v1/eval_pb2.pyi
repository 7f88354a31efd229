import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from tierank.v1 import rank_pb2 as _rank_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TextFile(_message.Message):
    __slots__ = ("name", "content")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    name: str
    content: str
    def __init__(self, name: _Optional[str] = ..., content: _Optional[str] = ...) -> None: ...

class JobTiers(_message.Message):
    __slots__ = ("job", "query_id")
    JOB_FIELD_NUMBER: _ClassVar[int]
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    job: str
    query_id: str
    def __init__(self, job: _Optional[str] = ..., query_id: _Optional[str] = ...) -> None: ...

class RankBand(_message.Message):
    __slots__ = ("last_position", "grade")
    LAST_POSITION_FIELD_NUMBER: _ClassVar[int]
    GRADE_FIELD_NUMBER: _ClassVar[int]
    last_position: int
    grade: int
    def __init__(self, last_position: _Optional[int] = ..., grade: _Optional[int] = ...) -> None: ...

class RankBands(_message.Message):
    __slots__ = ("bands", "below", "mean_position")
    BANDS_FIELD_NUMBER: _ClassVar[int]
    BELOW_FIELD_NUMBER: _ClassVar[int]
    MEAN_POSITION_FIELD_NUMBER: _ClassVar[int]
    bands: _containers.RepeatedCompositeFieldContainer[RankBand]
    below: int
    mean_position: bool
    def __init__(self, bands: _Optional[_Iterable[_Union[RankBand, _Mapping]]] = ..., below: _Optional[int] = ..., mean_position: _Optional[bool] = ...) -> None: ...

class GradeLevels(_message.Message):
    __slots__ = ("levels", "lowest")
    LEVELS_FIELD_NUMBER: _ClassVar[int]
    LOWEST_FIELD_NUMBER: _ClassVar[int]
    levels: int
    lowest: int
    def __init__(self, levels: _Optional[int] = ..., lowest: _Optional[int] = ...) -> None: ...

class PointwiseAnchoring(_message.Message):
    __slots__ = ("judge", "seed", "probe_rate")
    JUDGE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    PROBE_RATE_FIELD_NUMBER: _ClassVar[int]
    judge: _rank_pb2.JudgeSpec
    seed: int
    probe_rate: float
    def __init__(self, judge: _Optional[_Union[_rank_pb2.JudgeSpec, _Mapping]] = ..., seed: _Optional[int] = ..., probe_rate: _Optional[float] = ...) -> None: ...

class TierMapping(_message.Message):
    __slots__ = ("rank_bands", "grade_levels", "pointwise")
    RANK_BANDS_FIELD_NUMBER: _ClassVar[int]
    GRADE_LEVELS_FIELD_NUMBER: _ClassVar[int]
    POINTWISE_FIELD_NUMBER: _ClassVar[int]
    rank_bands: RankBands
    grade_levels: GradeLevels
    pointwise: PointwiseAnchoring
    def __init__(self, rank_bands: _Optional[_Union[RankBands, _Mapping]] = ..., grade_levels: _Optional[_Union[GradeLevels, _Mapping]] = ..., pointwise: _Optional[_Union[PointwiseAnchoring, _Mapping]] = ...) -> None: ...

class TierLabels(_message.Message):
    __slots__ = ("jobs", "mapping")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    MAPPING_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobTiers]
    mapping: TierMapping
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobTiers, _Mapping]]] = ..., mapping: _Optional[_Union[TierMapping, _Mapping]] = ...) -> None: ...

class LabelSource(_message.Message):
    __slots__ = ("qrels", "tiers")
    QRELS_FIELD_NUMBER: _ClassVar[int]
    TIERS_FIELD_NUMBER: _ClassVar[int]
    qrels: TextFile
    tiers: TierLabels
    def __init__(self, qrels: _Optional[_Union[TextFile, _Mapping]] = ..., tiers: _Optional[_Union[TierLabels, _Mapping]] = ...) -> None: ...

class EvaluateRequest(_message.Message):
    __slots__ = ("runs", "labels", "measures", "all_queries", "max_docs", "na_as_zero", "per_query")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    MEASURES_FIELD_NUMBER: _ClassVar[int]
    ALL_QUERIES_FIELD_NUMBER: _ClassVar[int]
    MAX_DOCS_FIELD_NUMBER: _ClassVar[int]
    NA_AS_ZERO_FIELD_NUMBER: _ClassVar[int]
    PER_QUERY_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[TextFile]
    labels: LabelSource
    measures: _containers.RepeatedScalarFieldContainer[str]
    all_queries: bool
    max_docs: int
    na_as_zero: bool
    per_query: bool
    def __init__(self, runs: _Optional[_Iterable[_Union[TextFile, _Mapping]]] = ..., labels: _Optional[_Union[LabelSource, _Mapping]] = ..., measures: _Optional[_Iterable[str]] = ..., all_queries: _Optional[bool] = ..., max_docs: _Optional[int] = ..., na_as_zero: _Optional[bool] = ..., per_query: _Optional[bool] = ...) -> None: ...

class MeasureAggregate(_message.Message):
    __slots__ = ("measure", "mean", "count", "na")
    MEASURE_FIELD_NUMBER: _ClassVar[int]
    MEAN_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    NA_FIELD_NUMBER: _ClassVar[int]
    measure: str
    mean: float
    count: int
    na: int
    def __init__(self, measure: _Optional[str] = ..., mean: _Optional[float] = ..., count: _Optional[int] = ..., na: _Optional[int] = ...) -> None: ...

class QueryValue(_message.Message):
    __slots__ = ("measure", "query_id", "value")
    MEASURE_FIELD_NUMBER: _ClassVar[int]
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    measure: str
    query_id: str
    value: float
    def __init__(self, measure: _Optional[str] = ..., query_id: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...

class RunEvaluation(_message.Message):
    __slots__ = ("run", "aggregates", "per_query")
    RUN_FIELD_NUMBER: _ClassVar[int]
    AGGREGATES_FIELD_NUMBER: _ClassVar[int]
    PER_QUERY_FIELD_NUMBER: _ClassVar[int]
    run: str
    aggregates: _containers.RepeatedCompositeFieldContainer[MeasureAggregate]
    per_query: _containers.RepeatedCompositeFieldContainer[QueryValue]
    def __init__(self, run: _Optional[str] = ..., aggregates: _Optional[_Iterable[_Union[MeasureAggregate, _Mapping]]] = ..., per_query: _Optional[_Iterable[_Union[QueryValue, _Mapping]]] = ...) -> None: ...

class LabelingReport(_message.Message):
    __slots__ = ("query_id", "job", "tier_count", "labeled_documents", "judge_calls", "non_monotone")
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    TIER_COUNT_FIELD_NUMBER: _ClassVar[int]
    LABELED_DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    JUDGE_CALLS_FIELD_NUMBER: _ClassVar[int]
    NON_MONOTONE_FIELD_NUMBER: _ClassVar[int]
    query_id: str
    job: str
    tier_count: int
    labeled_documents: int
    judge_calls: int
    non_monotone: int
    def __init__(self, query_id: _Optional[str] = ..., job: _Optional[str] = ..., tier_count: _Optional[int] = ..., labeled_documents: _Optional[int] = ..., judge_calls: _Optional[int] = ..., non_monotone: _Optional[int] = ...) -> None: ...

class EvaluateResponse(_message.Message):
    __slots__ = ("runs", "labeling")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    LABELING_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[RunEvaluation]
    labeling: _containers.RepeatedCompositeFieldContainer[LabelingReport]
    def __init__(self, runs: _Optional[_Iterable[_Union[RunEvaluation, _Mapping]]] = ..., labeling: _Optional[_Iterable[_Union[LabelingReport, _Mapping]]] = ...) -> None: ...

class CompareLabelsRequest(_message.Message):
    __slots__ = ("a", "b", "relevance_threshold", "runs", "measure", "rbo_persistence")
    A_FIELD_NUMBER: _ClassVar[int]
    B_FIELD_NUMBER: _ClassVar[int]
    RELEVANCE_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    MEASURE_FIELD_NUMBER: _ClassVar[int]
    RBO_PERSISTENCE_FIELD_NUMBER: _ClassVar[int]
    a: LabelSource
    b: LabelSource
    relevance_threshold: int
    runs: _containers.RepeatedCompositeFieldContainer[TextFile]
    measure: str
    rbo_persistence: float
    def __init__(self, a: _Optional[_Union[LabelSource, _Mapping]] = ..., b: _Optional[_Union[LabelSource, _Mapping]] = ..., relevance_threshold: _Optional[int] = ..., runs: _Optional[_Iterable[_Union[TextFile, _Mapping]]] = ..., measure: _Optional[str] = ..., rbo_persistence: _Optional[float] = ...) -> None: ...

class ConfusionMatrix(_message.Message):
    __slots__ = ("grades", "rows")
    GRADES_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    grades: _containers.RepeatedScalarFieldContainer[int]
    rows: _containers.RepeatedCompositeFieldContainer[ConfusionRow]
    def __init__(self, grades: _Optional[_Iterable[int]] = ..., rows: _Optional[_Iterable[_Union[ConfusionRow, _Mapping]]] = ...) -> None: ...

class ConfusionRow(_message.Message):
    __slots__ = ("counts",)
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    counts: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, counts: _Optional[_Iterable[int]] = ...) -> None: ...

class SystemScore(_message.Message):
    __slots__ = ("run", "score_a", "score_b")
    RUN_FIELD_NUMBER: _ClassVar[int]
    SCORE_A_FIELD_NUMBER: _ClassVar[int]
    SCORE_B_FIELD_NUMBER: _ClassVar[int]
    run: str
    score_a: float
    score_b: float
    def __init__(self, run: _Optional[str] = ..., score_a: _Optional[float] = ..., score_b: _Optional[float] = ...) -> None: ...

class SystemAgreement(_message.Message):
    __slots__ = ("measure", "query_count", "systems", "kendall_tau_b", "spearman_rho", "rbo_persistence", "rbo_extrapolated", "rbo_lower_bound")
    MEASURE_FIELD_NUMBER: _ClassVar[int]
    QUERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    SYSTEMS_FIELD_NUMBER: _ClassVar[int]
    KENDALL_TAU_B_FIELD_NUMBER: _ClassVar[int]
    SPEARMAN_RHO_FIELD_NUMBER: _ClassVar[int]
    RBO_PERSISTENCE_FIELD_NUMBER: _ClassVar[int]
    RBO_EXTRAPOLATED_FIELD_NUMBER: _ClassVar[int]
    RBO_LOWER_BOUND_FIELD_NUMBER: _ClassVar[int]
    measure: str
    query_count: int
    systems: _containers.RepeatedCompositeFieldContainer[SystemScore]
    kendall_tau_b: float
    spearman_rho: float
    rbo_persistence: float
    rbo_extrapolated: float
    rbo_lower_bound: float
    def __init__(self, measure: _Optional[str] = ..., query_count: _Optional[int] = ..., systems: _Optional[_Iterable[_Union[SystemScore, _Mapping]]] = ..., kendall_tau_b: _Optional[float] = ..., spearman_rho: _Optional[float] = ..., rbo_persistence: _Optional[float] = ..., rbo_extrapolated: _Optional[float] = ..., rbo_lower_bound: _Optional[float] = ...) -> None: ...

class CompareLabelsResponse(_message.Message):
    __slots__ = ("shared_pairs", "only_a", "only_b", "kappa", "linear_weighted_kappa", "quadratic_weighted_kappa", "binary_kappa", "relevance_threshold", "confusion", "systems", "labeling")
    SHARED_PAIRS_FIELD_NUMBER: _ClassVar[int]
    ONLY_A_FIELD_NUMBER: _ClassVar[int]
    ONLY_B_FIELD_NUMBER: _ClassVar[int]
    KAPPA_FIELD_NUMBER: _ClassVar[int]
    LINEAR_WEIGHTED_KAPPA_FIELD_NUMBER: _ClassVar[int]
    QUADRATIC_WEIGHTED_KAPPA_FIELD_NUMBER: _ClassVar[int]
    BINARY_KAPPA_FIELD_NUMBER: _ClassVar[int]
    RELEVANCE_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    CONFUSION_FIELD_NUMBER: _ClassVar[int]
    SYSTEMS_FIELD_NUMBER: _ClassVar[int]
    LABELING_FIELD_NUMBER: _ClassVar[int]
    shared_pairs: int
    only_a: int
    only_b: int
    kappa: float
    linear_weighted_kappa: float
    quadratic_weighted_kappa: float
    binary_kappa: float
    relevance_threshold: int
    confusion: ConfusionMatrix
    systems: SystemAgreement
    labeling: _containers.RepeatedCompositeFieldContainer[LabelingReport]
    def __init__(self, shared_pairs: _Optional[int] = ..., only_a: _Optional[int] = ..., only_b: _Optional[int] = ..., kappa: _Optional[float] = ..., linear_weighted_kappa: _Optional[float] = ..., quadratic_weighted_kappa: _Optional[float] = ..., binary_kappa: _Optional[float] = ..., relevance_threshold: _Optional[int] = ..., confusion: _Optional[_Union[ConfusionMatrix, _Mapping]] = ..., systems: _Optional[_Union[SystemAgreement, _Mapping]] = ..., labeling: _Optional[_Iterable[_Union[LabelingReport, _Mapping]]] = ...) -> None: ...

class ExportQrelsRequest(_message.Message):
    __slots__ = ("tiers",)
    TIERS_FIELD_NUMBER: _ClassVar[int]
    tiers: TierLabels
    def __init__(self, tiers: _Optional[_Union[TierLabels, _Mapping]] = ...) -> None: ...

class ExportQrelsResponse(_message.Message):
    __slots__ = ("qrels", "labeling")
    QRELS_FIELD_NUMBER: _ClassVar[int]
    LABELING_FIELD_NUMBER: _ClassVar[int]
    qrels: str
    labeling: _containers.RepeatedCompositeFieldContainer[LabelingReport]
    def __init__(self, qrels: _Optional[str] = ..., labeling: _Optional[_Iterable[_Union[LabelingReport, _Mapping]]] = ...) -> None: ...

class GradePair(_message.Message):
    __slots__ = ("query_id", "query", "passage")
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    PASSAGE_FIELD_NUMBER: _ClassVar[int]
    query_id: str
    query: str
    passage: _rank_pb2.Candidate
    def __init__(self, query_id: _Optional[str] = ..., query: _Optional[str] = ..., passage: _Optional[_Union[_rank_pb2.Candidate, _Mapping]] = ...) -> None: ...

class PairGrade(_message.Message):
    __slots__ = ("query_id", "doc_id", "grade", "cached", "failure_reason", "usage")
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    GRADE_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    FAILURE_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    query_id: str
    doc_id: str
    grade: int
    cached: bool
    failure_reason: str
    usage: _rank_pb2.Usage
    def __init__(self, query_id: _Optional[str] = ..., doc_id: _Optional[str] = ..., grade: _Optional[int] = ..., cached: _Optional[bool] = ..., failure_reason: _Optional[str] = ..., usage: _Optional[_Union[_rank_pb2.Usage, _Mapping]] = ...) -> None: ...

class GradingStats(_message.Message):
    __slots__ = ("calls", "cached_calls", "failed_calls", "usage")
    CALLS_FIELD_NUMBER: _ClassVar[int]
    CACHED_CALLS_FIELD_NUMBER: _ClassVar[int]
    FAILED_CALLS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    calls: int
    cached_calls: int
    failed_calls: int
    usage: _rank_pb2.Usage
    def __init__(self, calls: _Optional[int] = ..., cached_calls: _Optional[int] = ..., failed_calls: _Optional[int] = ..., usage: _Optional[_Union[_rank_pb2.Usage, _Mapping]] = ...) -> None: ...

class GradePairsRequest(_message.Message):
    __slots__ = ("judge", "pairs", "rubric", "seed", "max_in_flight")
    JUDGE_FIELD_NUMBER: _ClassVar[int]
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    RUBRIC_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    judge: _rank_pb2.JudgeSpec
    pairs: _containers.RepeatedCompositeFieldContainer[GradePair]
    rubric: str
    seed: int
    max_in_flight: int
    def __init__(self, judge: _Optional[_Union[_rank_pb2.JudgeSpec, _Mapping]] = ..., pairs: _Optional[_Iterable[_Union[GradePair, _Mapping]]] = ..., rubric: _Optional[str] = ..., seed: _Optional[int] = ..., max_in_flight: _Optional[int] = ...) -> None: ...

class GradePairsResponse(_message.Message):
    __slots__ = ("grades", "stats")
    GRADES_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    grades: _containers.RepeatedCompositeFieldContainer[PairGrade]
    stats: GradingStats
    def __init__(self, grades: _Optional[_Iterable[_Union[PairGrade, _Mapping]]] = ..., stats: _Optional[_Union[GradingStats, _Mapping]] = ...) -> None: ...

class FillQrelsRequest(_message.Message):
    __slots__ = ("qrels", "runs", "depth", "topics", "passages", "judge", "rubric", "seed", "max_in_flight", "held_in_sample", "request_id")
    QRELS_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    PASSAGES_FIELD_NUMBER: _ClassVar[int]
    JUDGE_FIELD_NUMBER: _ClassVar[int]
    RUBRIC_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    HELD_IN_SAMPLE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    qrels: TextFile
    runs: _containers.RepeatedCompositeFieldContainer[TextFile]
    depth: int
    topics: TextFile
    passages: TextFile
    judge: _rank_pb2.JudgeSpec
    rubric: str
    seed: int
    max_in_flight: int
    held_in_sample: int
    request_id: str
    def __init__(self, qrels: _Optional[_Union[TextFile, _Mapping]] = ..., runs: _Optional[_Iterable[_Union[TextFile, _Mapping]]] = ..., depth: _Optional[int] = ..., topics: _Optional[_Union[TextFile, _Mapping]] = ..., passages: _Optional[_Union[TextFile, _Mapping]] = ..., judge: _Optional[_Union[_rank_pb2.JudgeSpec, _Mapping]] = ..., rubric: _Optional[str] = ..., seed: _Optional[int] = ..., max_in_flight: _Optional[int] = ..., held_in_sample: _Optional[int] = ..., request_id: _Optional[str] = ...) -> None: ...

class FillQrelsResponse(_message.Message):
    __slots__ = ("qrels", "added", "stats", "held_in")
    QRELS_FIELD_NUMBER: _ClassVar[int]
    ADDED_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    HELD_IN_FIELD_NUMBER: _ClassVar[int]
    qrels: str
    added: _containers.RepeatedCompositeFieldContainer[PairGrade]
    stats: GradingStats
    held_in: HeldInAgreement
    def __init__(self, qrels: _Optional[str] = ..., added: _Optional[_Iterable[_Union[PairGrade, _Mapping]]] = ..., stats: _Optional[_Union[GradingStats, _Mapping]] = ..., held_in: _Optional[_Union[HeldInAgreement, _Mapping]] = ...) -> None: ...

class HeldInAgreement(_message.Message):
    __slots__ = ("pairs", "kappa", "quadratic_weighted_kappa", "binary_agreement", "confusion")
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    KAPPA_FIELD_NUMBER: _ClassVar[int]
    QUADRATIC_WEIGHTED_KAPPA_FIELD_NUMBER: _ClassVar[int]
    BINARY_AGREEMENT_FIELD_NUMBER: _ClassVar[int]
    CONFUSION_FIELD_NUMBER: _ClassVar[int]
    pairs: int
    kappa: float
    quadratic_weighted_kappa: float
    binary_agreement: Proportion
    confusion: ConfusionMatrix
    def __init__(self, pairs: _Optional[int] = ..., kappa: _Optional[float] = ..., quadratic_weighted_kappa: _Optional[float] = ..., binary_agreement: _Optional[_Union[Proportion, _Mapping]] = ..., confusion: _Optional[_Union[ConfusionMatrix, _Mapping]] = ...) -> None: ...

class Proportion(_message.Message):
    __slots__ = ("value", "low", "high", "count", "total")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    value: float
    low: float
    high: float
    count: int
    total: int
    def __init__(self, value: _Optional[float] = ..., low: _Optional[float] = ..., high: _Optional[float] = ..., count: _Optional[int] = ..., total: _Optional[int] = ...) -> None: ...

class QualifyJudgeRequest(_message.Message):
    __slots__ = ("judge", "qrels", "topics", "passages", "run", "rubric", "batch_size", "shuffles", "max_queries", "batches_per_query", "seed", "max_in_flight", "pointwise", "relevance_threshold", "request_id")
    JUDGE_FIELD_NUMBER: _ClassVar[int]
    QRELS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    PASSAGES_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    RUBRIC_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    SHUFFLES_FIELD_NUMBER: _ClassVar[int]
    MAX_QUERIES_FIELD_NUMBER: _ClassVar[int]
    BATCHES_PER_QUERY_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    POINTWISE_FIELD_NUMBER: _ClassVar[int]
    RELEVANCE_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    judge: _rank_pb2.JudgeSpec
    qrels: TextFile
    topics: TextFile
    passages: TextFile
    run: TextFile
    rubric: str
    batch_size: int
    shuffles: int
    max_queries: int
    batches_per_query: int
    seed: int
    max_in_flight: int
    pointwise: bool
    relevance_threshold: int
    request_id: str
    def __init__(self, judge: _Optional[_Union[_rank_pb2.JudgeSpec, _Mapping]] = ..., qrels: _Optional[_Union[TextFile, _Mapping]] = ..., topics: _Optional[_Union[TextFile, _Mapping]] = ..., passages: _Optional[_Union[TextFile, _Mapping]] = ..., run: _Optional[_Union[TextFile, _Mapping]] = ..., rubric: _Optional[str] = ..., batch_size: _Optional[int] = ..., shuffles: _Optional[int] = ..., max_queries: _Optional[int] = ..., batches_per_query: _Optional[int] = ..., seed: _Optional[int] = ..., max_in_flight: _Optional[int] = ..., pointwise: _Optional[bool] = ..., relevance_threshold: _Optional[int] = ..., request_id: _Optional[str] = ...) -> None: ...

class GapAccuracy(_message.Message):
    __slots__ = ("gap", "accuracy")
    GAP_FIELD_NUMBER: _ClassVar[int]
    ACCURACY_FIELD_NUMBER: _ClassVar[int]
    gap: int
    accuracy: Proportion
    def __init__(self, gap: _Optional[int] = ..., accuracy: _Optional[_Union[Proportion, _Mapping]] = ...) -> None: ...

class PositionShare(_message.Message):
    __slots__ = ("position", "ranked_first", "chance")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    RANKED_FIRST_FIELD_NUMBER: _ClassVar[int]
    CHANCE_FIELD_NUMBER: _ClassVar[int]
    position: int
    ranked_first: Proportion
    chance: float
    def __init__(self, position: _Optional[int] = ..., ranked_first: _Optional[_Union[Proportion, _Mapping]] = ..., chance: _Optional[float] = ...) -> None: ...

class ListwiseQuality(_message.Message):
    __slots__ = ("batch_size", "pair_accuracy", "by_gap", "first_position", "repeats_shown_order", "reverses_shown_order", "self_consistency", "cyclic_triples")
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAIR_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    BY_GAP_FIELD_NUMBER: _ClassVar[int]
    FIRST_POSITION_FIELD_NUMBER: _ClassVar[int]
    REPEATS_SHOWN_ORDER_FIELD_NUMBER: _ClassVar[int]
    REVERSES_SHOWN_ORDER_FIELD_NUMBER: _ClassVar[int]
    SELF_CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    CYCLIC_TRIPLES_FIELD_NUMBER: _ClassVar[int]
    batch_size: int
    pair_accuracy: Proportion
    by_gap: _containers.RepeatedCompositeFieldContainer[GapAccuracy]
    first_position: _containers.RepeatedCompositeFieldContainer[PositionShare]
    repeats_shown_order: Proportion
    reverses_shown_order: Proportion
    self_consistency: Proportion
    cyclic_triples: Proportion
    def __init__(self, batch_size: _Optional[int] = ..., pair_accuracy: _Optional[_Union[Proportion, _Mapping]] = ..., by_gap: _Optional[_Iterable[_Union[GapAccuracy, _Mapping]]] = ..., first_position: _Optional[_Iterable[_Union[PositionShare, _Mapping]]] = ..., repeats_shown_order: _Optional[_Union[Proportion, _Mapping]] = ..., reverses_shown_order: _Optional[_Union[Proportion, _Mapping]] = ..., self_consistency: _Optional[_Union[Proportion, _Mapping]] = ..., cyclic_triples: _Optional[_Union[Proportion, _Mapping]] = ...) -> None: ...

class PointwiseQuality(_message.Message):
    __slots__ = ("relevance_threshold", "confusion", "linear_weighted_kappa", "quadratic_weighted_kappa", "precision", "recall", "f1")
    RELEVANCE_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    CONFUSION_FIELD_NUMBER: _ClassVar[int]
    LINEAR_WEIGHTED_KAPPA_FIELD_NUMBER: _ClassVar[int]
    QUADRATIC_WEIGHTED_KAPPA_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    RECALL_FIELD_NUMBER: _ClassVar[int]
    F1_FIELD_NUMBER: _ClassVar[int]
    relevance_threshold: int
    confusion: ConfusionMatrix
    linear_weighted_kappa: float
    quadratic_weighted_kappa: float
    precision: Proportion
    recall: Proportion
    f1: float
    def __init__(self, relevance_threshold: _Optional[int] = ..., confusion: _Optional[_Union[ConfusionMatrix, _Mapping]] = ..., linear_weighted_kappa: _Optional[float] = ..., quadratic_weighted_kappa: _Optional[float] = ..., precision: _Optional[_Union[Proportion, _Mapping]] = ..., recall: _Optional[_Union[Proportion, _Mapping]] = ..., f1: _Optional[float] = ...) -> None: ...

class Qualification(_message.Message):
    __slots__ = ("name", "judge", "judge_identity", "create_time", "query_count", "listwise", "pointwise", "cost", "mean_latency_seconds", "usable", "verdict", "weight", "rubric_preset")
    NAME_FIELD_NUMBER: _ClassVar[int]
    JUDGE_FIELD_NUMBER: _ClassVar[int]
    JUDGE_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    QUERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    LISTWISE_FIELD_NUMBER: _ClassVar[int]
    POINTWISE_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    MEAN_LATENCY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    USABLE_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    RUBRIC_PRESET_FIELD_NUMBER: _ClassVar[int]
    name: str
    judge: _rank_pb2.JudgeSpec
    judge_identity: str
    create_time: _timestamp_pb2.Timestamp
    query_count: int
    listwise: ListwiseQuality
    pointwise: PointwiseQuality
    cost: GradingStats
    mean_latency_seconds: float
    usable: bool
    verdict: str
    weight: float
    rubric_preset: str
    def __init__(self, name: _Optional[str] = ..., judge: _Optional[_Union[_rank_pb2.JudgeSpec, _Mapping]] = ..., judge_identity: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., query_count: _Optional[int] = ..., listwise: _Optional[_Union[ListwiseQuality, _Mapping]] = ..., pointwise: _Optional[_Union[PointwiseQuality, _Mapping]] = ..., cost: _Optional[_Union[GradingStats, _Mapping]] = ..., mean_latency_seconds: _Optional[float] = ..., usable: _Optional[bool] = ..., verdict: _Optional[str] = ..., weight: _Optional[float] = ..., rubric_preset: _Optional[str] = ...) -> None: ...

class ListQualificationsRequest(_message.Message):
    __slots__ = ("judge_identity", "page_size")
    JUDGE_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    judge_identity: str
    page_size: int
    def __init__(self, judge_identity: _Optional[str] = ..., page_size: _Optional[int] = ...) -> None: ...

class ListQualificationsResponse(_message.Message):
    __slots__ = ("qualifications",)
    QUALIFICATIONS_FIELD_NUMBER: _ClassVar[int]
    qualifications: _containers.RepeatedCompositeFieldContainer[Qualification]
    def __init__(self, qualifications: _Optional[_Iterable[_Union[Qualification, _Mapping]]] = ...) -> None: ...

class DeleteQualificationRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListRubricsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RubricPreset(_message.Message):
    __slots__ = ("name", "version", "kind", "description", "text")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: int
    kind: str
    description: str
    text: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[int] = ..., kind: _Optional[str] = ..., description: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class ListRubricsResponse(_message.Message):
    __slots__ = ("presets",)
    PRESETS_FIELD_NUMBER: _ClassVar[int]
    presets: _containers.RepeatedCompositeFieldContainer[RubricPreset]
    def __init__(self, presets: _Optional[_Iterable[_Union[RubricPreset, _Mapping]]] = ...) -> None: ...

class Operation(_message.Message):
    __slots__ = ("name", "request_id", "method", "state", "create_time", "update_time", "progress", "error", "qualification", "fill")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    QUALIFICATION_FIELD_NUMBER: _ClassVar[int]
    FILL_FIELD_NUMBER: _ClassVar[int]
    name: str
    request_id: str
    method: str
    state: _rank_pb2.JobState
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    progress: OperationProgress
    error: _rank_pb2.JobError
    qualification: Qualification
    fill: FillQrelsResponse
    def __init__(self, name: _Optional[str] = ..., request_id: _Optional[str] = ..., method: _Optional[str] = ..., state: _Optional[_Union[_rank_pb2.JobState, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., progress: _Optional[_Union[OperationProgress, _Mapping]] = ..., error: _Optional[_Union[_rank_pb2.JobError, _Mapping]] = ..., qualification: _Optional[_Union[Qualification, _Mapping]] = ..., fill: _Optional[_Union[FillQrelsResponse, _Mapping]] = ...) -> None: ...

class OperationProgress(_message.Message):
    __slots__ = ("planned_calls", "done_calls", "failed_calls", "cached_calls", "usage")
    PLANNED_CALLS_FIELD_NUMBER: _ClassVar[int]
    DONE_CALLS_FIELD_NUMBER: _ClassVar[int]
    FAILED_CALLS_FIELD_NUMBER: _ClassVar[int]
    CACHED_CALLS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    planned_calls: int
    done_calls: int
    failed_calls: int
    cached_calls: int
    usage: _rank_pb2.Usage
    def __init__(self, planned_calls: _Optional[int] = ..., done_calls: _Optional[int] = ..., failed_calls: _Optional[int] = ..., cached_calls: _Optional[int] = ..., usage: _Optional[_Union[_rank_pb2.Usage, _Mapping]] = ...) -> None: ...

class GetOperationRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListOperationsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListOperationsResponse(_message.Message):
    __slots__ = ("operations", "next_page_token")
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    operations: _containers.RepeatedCompositeFieldContainer[Operation]
    next_page_token: str
    def __init__(self, operations: _Optional[_Iterable[_Union[Operation, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelOperationRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class WatchOperationRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...
