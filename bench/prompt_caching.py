"""What providers' prompt caching saves on tierank's listwise prompts (issue 24 item 3).

    .venv/bin/python -m tierank.bench.prompt_caching [--k 10] [--calls 15.3] [--first-wave 10]

For each of the 43 DL19 queries, the BM25 top-100 passages of the shared data are cut into the
calls of a job at batch size k and rendered with the server's own prompt (judges.prompt), once
with the default rubric and once with a long domain rubric (web_search_rubric.txt, about 2,300
tokens). Reported per rubric: the stable prefix (instructions, rubric, query, the form of the
answer) against the whole prompt, in tokens at the server's rule of 4 characters a token (real
tokenizers differ by some 10-20%); then per vendor and model, how many queries' prefixes are long
enough to be cached, what share of the job's input tokens would be read from the cache, and
the job's cost per 1,000 queries with and without caching at the default price table.

The job: `--calls` calls per query (15.3, tierank's mean for top-10 of the BM25 top-100 at k=10,
bench/README.md section 5), the first `--first-wave` of them sent at once (the partition of the
pool into batches of k). A provider caches a prefix only once a request carrying it has been
processed, so two columns: "after the first call", every call after the first finds the cache
(the best case, and what the test fakes do), and "after the first wave", only calls after the
first wave do, while the first wave all miss (and on Anthropic each of them writes the cache at
1.25x). Each call is charged `--output-tokens` of answer. Calls after the first wave are
batches of k passages drawn across the pool (their size is what matters here).

Vendor rules, from their documentation (docs/providers.md, "Prompt caching", says which pages):
OpenAI caches automatically from 1,024 prompt tokens, in steps of 128 tokens of common prefix;
Anthropic caches the prefix marked cache_control when it reaches the model's minimum (judges.
anthropic_judge.MIN_CACHEABLE_TOKENS), which tierank marks only then; Gemini 2.5 caches a
repeated prefix implicitly from 2,048 tokens.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from tierank.client.commands._shared import positive_float, positive_int
from tierank.server.judges.anthropic_judge import min_cacheable_tokens
from tierank.server.judges.base import Passage
from tierank.server.judges.prices import DEFAULT_PRICES, Price, TokenCounts, cost_usd
from tierank.server.judges.prompt import (
    CHARS_PER_TOKEN,
    AnswerFormat,
    estimate_tokens,
    render_prompt_parts,
)

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "trec-dl"
BM25 = DATA / "passages" / "rankllm.BM25.retrieve_results_dl19.json"
DOMAIN_RUBRIC = Path(__file__).with_name("web_search_rubric.txt")
OPENAI_MIN_TOKENS = 1024
OPENAI_STEP_TOKENS = 128
GEMINI_MIN_TOKENS = 2048
MODELS = (
    "openai/gpt-4.1-mini",
    "openai/gpt-5-mini",
    "anthropic/claude-sonnet-4-5",
    "anthropic/claude-haiku-4-5",
    "gemini/gemini-2.5-flash",
    "gemini/gemini-2.5-pro",
)


@dataclass(frozen=True)
class QueryPrompts:
    stable_tokens: int
    # Tokens of each call's whole prompt, and of the prefix it shares with the query's first.
    call_tokens: list[int]
    common_tokens: list[int]


def query_prompts(
    query: str, rubric: str, passages: list[Passage], k: int, calls: int
) -> QueryPrompts:
    batches = [tuple(passages[i : i + k]) for i in range(0, len(passages), k)]
    stride = max(len(passages) // k, 1)
    offset = 0
    while len(batches) < calls:
        batches.append(tuple(passages[offset::stride][:k]))
        offset = (offset + 1) % stride
    parts = [
        render_prompt_parts(query, rubric, tuple(batch), AnswerFormat.JSON)
        for batch in batches[:calls]
    ]
    first = parts[0].text
    common = [_common_prefix(first, p.text) if i else 0 for i, p in enumerate(parts)]
    return QueryPrompts(
        stable_tokens=estimate_tokens(parts[0].stable),
        call_tokens=[estimate_tokens(p.text) for p in parts],
        # Whole tokens only: a token cut by the end of the common prefix is not shared.
        common_tokens=[n // CHARS_PER_TOKEN for n in common],
    )


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def job_tokens(
    prompts: QueryPrompts, model: str, hits_from: int, output_tokens: int
) -> tuple[TokenCounts, bool]:
    """The job's tokens on `model` when calls from index `hits_from` on find the cache, and
    whether the model caches this query's prefix at all."""
    provider = model.split("/")[0]
    total = TokenCounts()
    cacheable = False
    for i, (tokens, common) in enumerate(
        zip(prompts.call_tokens, prompts.common_tokens, strict=True)
    ):
        cached = written = 0
        if provider == "openai":
            prefix = common // OPENAI_STEP_TOKENS * OPENAI_STEP_TOKENS
            cacheable = prompts.stable_tokens >= OPENAI_MIN_TOKENS
            if i >= hits_from and tokens >= OPENAI_MIN_TOKENS and prefix >= OPENAI_MIN_TOKENS:
                cached = prefix
        elif provider == "gemini":
            cacheable = prompts.stable_tokens >= GEMINI_MIN_TOKENS
            if i >= hits_from and common >= GEMINI_MIN_TOKENS:
                cached = common
        else:
            # Only the marked stable block is cached: written by each call that misses.
            cacheable = prompts.stable_tokens >= min_cacheable_tokens(model.split("/")[1])
            if cacheable:
                cached, written = (
                    (prompts.stable_tokens, 0) if i >= hits_from else (0, prompts.stable_tokens)
                )
        total += TokenCounts(tokens, output_tokens, cached, written)
    return total, cacheable


def report(
    name: str, rubric: str, pools: list[tuple[str, list[Passage]]], args: argparse.Namespace
) -> None:
    calls = round(args.calls)
    scale = 1000 / len(pools) * args.calls / calls
    # JSON, the answer form of the OpenAI and Gemini judges; Anthropic's text form makes the
    # stable prefix a few tokens longer.
    prompts = [query_prompts(query, rubric, passages, args.k, calls) for query, passages in pools]
    stable = [p.stable_tokens for p in prompts]
    whole = [statistics.mean(p.call_tokens) for p in prompts]
    print(f"\n### {name}\n")
    print(
        f"stable prefix: {statistics.mean(stable):,.0f} tokens (min {min(stable):,}, "
        f"max {max(stable):,}); whole prompt: {statistics.mean(whole):,.0f} tokens per call; "
        f"the prefix is {statistics.mean(stable) / statistics.mean(whole):.0%} of each prompt"
    )
    print(
        "\n| model | queries cacheable | cached share, after the first call | "
        "$ per 1,000 queries: uncached / after first call / after first wave | "
        "saved: after first call / after first wave |"
    )
    print("|---|---|---|---|---|")
    for model in MODELS:
        price = DEFAULT_PRICES[model]
        plain = cached_all = cached_wave = 0.0
        cacheable = 0
        read = spent = 0
        for p in prompts:
            tokens, ok = job_tokens(p, model, 1, args.output_tokens)
            wave_tokens, _ = job_tokens(p, model, args.first_wave, args.output_tokens)
            cacheable += ok
            read += tokens.cached_input
            spent += tokens.input
            plain += _uncached(tokens, price)
            cached_all += cost_usd(tokens, price)
            cached_wave += cost_usd(wave_tokens, price)
        saved = (plain - cached_all) / plain
        saved_wave = (plain - cached_wave) / plain
        print(
            f"| {model} | {cacheable}/{len(prompts)} | {read / spent:.0%} | "
            f"{plain * scale:,.2f} / {cached_all * scale:,.2f} / {cached_wave * scale:,.2f} | "
            f"{saved:.0%} / {saved_wave:.0%} |"
        )


def _uncached(tokens: TokenCounts, price: Price) -> float:
    return cost_usd(TokenCounts(tokens.input, tokens.output), price)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=positive_int, default=10, help="passages per call")
    parser.add_argument("--calls", type=positive_float, default=15.3, help="calls per query (mean)")
    parser.add_argument(
        "--first-wave", type=positive_int, default=10, help="calls a query sends at once first"
    )
    parser.add_argument(
        "--output-tokens", type=positive_int, default=40, help="output tokens per call"
    )
    args = parser.parse_args()
    if args.first_wave > args.calls:
        parser.error(f"--first-wave {args.first_wave} is more than --calls {args.calls}")
    pools = [
        (
            entry["query"],
            [Passage(hit["docid"], hit["content"]) for hit in entry["hits"]],
        )
        for entry in json.loads(BM25.read_text())
    ]
    print(
        f"DL19, {len(pools)} queries, BM25 top-100, k={args.k}, {args.calls} calls per query "
        f"({args.first_wave} in the first wave), {args.output_tokens} output tokens per call"
    )
    report("default rubric", "", pools, args)
    report(f"domain rubric ({DOMAIN_RUBRIC.name})", DOMAIN_RUBRIC.read_text(), pools, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
