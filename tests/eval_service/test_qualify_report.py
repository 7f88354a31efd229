"""`tierank qualify --pointwise`'s text report shows the grades a judge gave beside the human
ones, and the confusion matrix (issue 22 item 16): F1 and recall alone made a judge that
answered "2" to nearly every passage look good."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import anyio
from fakes import Answer, FakeLLMServer, Recorded

FLAVOR = "openai-compatible"
_GRADED = re.compile(r"^\[(\d+)\] passage \S+ grade (\d)", re.MULTILINE)


def says_two(request: Recorded) -> Answer:
    """Ranks listwise batches by the hidden grade; grades every passage 2 but one, 3."""
    if "##final score" in request.prompt:
        return Answer("##final score: 3" if "d0x3 " in request.prompt else "##final score: 2")
    ranked = sorted(_GRADED.findall(request.prompt), key=lambda found: -int(found[1]))
    return Answer(" > ".join(f"[{number}]" for number, _ in ranked))


async def test_the_report_shows_the_grade_spread_and_the_confusion_matrix(
    llm_server_address: str, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.respond_with(FLAVOR, says_two)
    args = []
    files = {"qrels": [], "topics": [], "passages": []}
    for q in range(2):
        files["topics"].append(f"q{q}\tquestion {q}")
        for d in range(10):
            files["qrels"].append(f"q{q} 0 d{q}x{d} {d % 4}")
            text = f"passage d{q}x{d} grade {d % 4} about question {q}"
            files["passages"].append(json.dumps({"id": f"d{q}x{d}", "text": text}))
    for name, lines in files.items():
        (tmp_path / name).write_text("\n".join(lines) + "\n")
        args += [f"--{name}", str(tmp_path / name)]

    args += ["--k", "10", "--pointwise", "--server", llm_server_address]
    report = await anyio.to_thread.run_sync(
        lambda: subprocess.run(
            [sys.executable, "-m", "tierank.client", "qualify", "--judge", f"{FLAVOR}:m", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
    )

    assert report.returncode == 0, report.stdout + report.stderr
    lines = [line.split() for line in report.stdout.splitlines()]
    # The judge gave 2 to 19 passages and 3 to one; the humans 0..3 as d % 4 of 0..9, twice.
    assert ["grades", "given", "0", "1", "2", "3"] in lines
    assert ["by", "the", "judge", "0", "0", "19", "1"] in lines
    assert ["by", "the", "humans", "6", "6", "4", "4"] in lines
    assert ["human", "0", "0", "0", "6", "0"] in lines
    assert ["human", "1", "0", "0", "6", "0"] in lines
    assert ["human", "2", "0", "0", "4", "0"] in lines
    assert ["human", "3", "0", "0", "3", "1"] in lines
    assert "the judge gave grade 2 to 19 of 20 passages" in report.stdout
