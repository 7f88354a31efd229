"""Relevance labels: a job's tiers as qrels (`tier_labels`), pairs graded pointwise by a
judge (`PairGrader`, `build_grader`), holes in human qrels filled (filling), and judges
qualified against human labels (qualify, qualify_stats). Used by the EvalService (server/rpc);
its judge calls are paid calls (server/tenancy/paid_call.py) like a job's.
"""

from tierank.server.labeling.grading import (
    GradedPair,
    GradingTally,
    Pair,
    PairGrader,
    build_grader,
    progress_of,
)
from tierank.server.labeling.qualify import LabelledSet, QualifySettings, qualification
from tierank.server.labeling.tier_labeling import DEFAULT_RANK_BANDS, fixed_mapping, tier_labels

__all__ = [
    "DEFAULT_RANK_BANDS",
    "GradedPair",
    "GradingTally",
    "LabelledSet",
    "Pair",
    "PairGrader",
    "QualifySettings",
    "build_grader",
    "fixed_mapping",
    "progress_of",
    "qualification",
    "tier_labels",
]
