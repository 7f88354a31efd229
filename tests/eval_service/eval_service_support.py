"""Paths and helpers the EvalService tests share (conftest holds the fixtures)."""

from __future__ import annotations

from pathlib import Path

from tierank.v1 import eval_pb2

REPO = Path(__file__).resolve().parents[2]
DL = REPO.parent / "shared" / "data" / "trec-dl"
DL_QRELS = DL / "qrels.dl19-passage.txt"
DL_RUNS = sorted((DL / "runs").glob("*.trec"))
BM25_RUN = DL / "runs" / "run.rankllm.BM25.dl19.top100.trec"


def text_file(path: Path) -> eval_pb2.TextFile:
    return eval_pb2.TextFile(name=path.name, content=path.read_text(encoding="utf-8"))
