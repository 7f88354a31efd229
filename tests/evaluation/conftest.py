"""Shared helpers for the evaluation tests: reading trec_eval output."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

# trec_eval measure name -> our measure name; "{r}" receives "(rel=N)" when -l N is not 1.
_TREC_EVAL_NAMES = [
    (re.compile(r"ndcg"), "nDCG"),
    (re.compile(r"ndcg_cut_(\d+)"), "nDCG@{k}"),
    (re.compile(r"map"), "AP{r}"),
    (re.compile(r"map_cut_(\d+)"), "AP{r}@{k}"),
    (re.compile(r"recip_rank"), "RR{r}"),
    (re.compile(r"P_(\d+)"), "P{r}@{k}"),
    (re.compile(r"recall_(\d+)"), "R{r}@{k}"),
    (re.compile(r"Rprec"), "Rprec{r}"),
    (re.compile(r"success_(\d+)"), "Success{r}@{k}"),
]


def our_measure_name(trec_eval_name: str, rel: int) -> str | None:
    """Our name for a trec_eval measure we implement, or None for one we do not."""
    for pattern, template in _TREC_EVAL_NAMES:
        match = pattern.fullmatch(trec_eval_name)
        if match:
            k = match.group(1) if match.groups() else ""
            return template.format(k=k, r=f"(rel={rel})" if rel != 1 else "")
    return None


def read_trec_eval_output(path: Path, rel: int = 1) -> dict[str, dict[str, str]]:
    """Expected values of the measures we implement: our measure name -> qid ('all') -> text."""
    expected: dict[str, dict[str, str]] = {}
    for line in path.read_text().splitlines():
        name, qid, value = line.split()
        ours = our_measure_name(name, rel)
        if ours is not None:
            expected.setdefault(ours, {})[qid] = value
    return expected


@pytest.fixture(scope="session")
def trec_eval_output():
    return read_trec_eval_output
