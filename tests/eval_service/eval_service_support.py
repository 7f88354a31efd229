"""Paths and helpers the EvalService tests share (conftest holds the fixtures)."""

from __future__ import annotations

from pathlib import Path

from shared_data import TREC_DL

from tierank.v1 import eval_pb2

DL_QRELS = TREC_DL / "qrels.dl19-passage.txt"
DL_RUNS = sorted((TREC_DL / "runs").glob("*.trec"))
BM25_RUN = TREC_DL / "runs" / "run.rankllm.BM25.dl19.top100.trec"


def text_file(path: Path) -> eval_pb2.TextFile:
    return eval_pb2.TextFile(name=path.name, content=path.read_text(encoding="utf-8"))
