"""What every LLM judge does the same way: prompt, limits, retries, parsing, usage and cost.

A provider adapter only turns a conversation into one SDK call (`_complete`) and the SDK's
answer or exception into a Completion or a CallError.

One judge call is at most two conversations' worth of requests: the prompt, and one follow-up
in the same conversation, only if the answer cannot be read (a corrective one) or, read, leaves
something out (a ranking that names only some of the passages: it asks for those by number;
the more complete of the two answers is kept, the first when the follow-up fails). A truncated
answer gets no follow-up (the same limit would cut it again): what is certainly complete is
kept, or the call fails as truncated. An answer longer than MAX_ANSWER_CHARS (a ranking is
small) is cut there before it is read or stored, and is treated as truncated; an HTTP answer
over bounded_http.MAX_RESPONSE_BYTES is not read at all and fails as truncated.
"""

from __future__ import annotations

import abc
import json
import random
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar, Generic, TypeVar

from tierank.server import metrics
from tierank.server.judges.accounts import REDACTED
from tierank.server.judges.base import (
    BatchRequest,
    FailureKind,
    Judge,
    JudgeConfig,
    JudgeConfigError,
    JudgeFailure,
    JudgeReply,
    JudgeUsage,
    Waiting,
)
from tierank.server.judges.breaker import CircuitBreaker
from tierank.server.judges.endpoints import canonical_base_url, resolves_only_to_loopback
from tierank.server.judges.limits import ProviderLimits
from tierank.server.judges.options import refuse_unknown_options
from tierank.server.judges.parse import Ranking, Unreadable, parse_ranking
from tierank.server.judges.prices import Price, TokenCounts, cost_usd
from tierank.server.judges.prompt import (
    DEFAULT_PASSAGE_TOKEN_BUDGET,
    QUALIFICATIONS_CARRY_OVER_FROM,
    TEMPLATE_VERSION,
    AnswerFormat,
    PromptParts,
    corrective_message,
    estimate_tokens,
    missing_passages_message,
    render_prompt_parts,
    upper_bound_tokens,
)
from tierank.server.judges.providers import BATCH_PROVIDERS, PROVIDERS_BY_NAME, no_batch_api
from tierank.server.judges.retry import CallError, InFlightTime, call_with_retries, time_limit_s
from tierank.server.judges.settings import JudgeSettings
from tierank.server.observability.genai import ChatSpan, chat_span

# Answer tokens allowed per passage when the job spec sets no max_output_tokens:
# "[12] > " is about 4 tokens and ", 12" about 2; the rest is headroom.
ANSWER_TOKENS_PER_PASSAGE = 8
ANSWER_TOKENS_FIXED = 32
# Extra output tokens allowed for reasoning/thinking when it is switched on and the job spec
# sets no max_output_tokens.
DEFAULT_REASONING_TOKENS = 4096
RAW_TEXT_SEPARATOR = "\n\n--- answer to the corrective follow-up ---\n\n"
# The most of one answer that is read and stored: a ranking of k passages needs a few bytes per
# passage, so anything near this is a model gone astray, not a verdict worth a database row.
MAX_ANSWER_CHARS = 64 * 1024
# A job may shorten the provider's timeout, but not to where no model could answer: a timeout
# chosen that short would only turn every call into a failure.
MIN_TIMEOUT_S = 1.0
# The judge option that sends a judge's calls through its provider's batch API (about half
# the price, answers within hours): "batch", or "call" (the default) for one request a call.
MODE_OPTION = "mode"
CALL_MODE = "call"
BATCH_MODE = "batch"
# Providers with a batch API (judges.batches); a self-hosted OpenAI-compatible server has none.

Answer = TypeVar("Answer")


@dataclass(frozen=True)
class AnswerSchema:
    """A JSON schema that providers with structured output enforce on the answer."""

    name: str
    schema: Mapping[str, object]


RANKING_SCHEMA = AnswerSchema(
    "ranking",
    {
        "type": "object",
        "properties": {"ranking": {"type": "array", "items": {"type": "integer"}}},
        "required": ["ranking"],
        "additionalProperties": False,
    },
)


def default_answer_tokens(k: int) -> int:
    return ANSWER_TOKENS_FIXED + ANSWER_TOKENS_PER_PASSAGE * k


@dataclass(frozen=True)
class Message:
    role: str  # "user" or "assistant"
    text: str
    # How many characters at the start of `text` are the same for every call of one query (a
    # prompt's PromptParts.stable): what a provider's prompt cache may serve. 0: none known.
    stable_chars: int = 0


@dataclass(frozen=True)
class Completion:
    text: str
    # The provider stopped at the output-token limit.
    truncated: bool
    tokens: TokenCounts
    # What the provider says of its answer, as it says it (for the call's span).
    response_id: str = ""
    response_model: str = ""
    finish_reason: str = ""


@dataclass(frozen=True)
class Exchange(Generic[Answer]):
    """One judge call: the answer read from the model, or why there is none, with usage and
    the prompt and raw answer text for audit."""

    answer: Answer | None
    failure: JudgeFailure | None
    usage: JudgeUsage
    prompt: str
    raw_text: str


def cap_answer(text: str) -> tuple[str, str | None]:
    """The answer cut to MAX_ANSWER_CHARS, and the marker to store after it when it was cut."""
    if len(text) <= MAX_ANSWER_CHARS:
        return text, None
    return text[:MAX_ANSWER_CHARS], (
        f"\n\n--- answer cut: {len(text)} characters, the first {MAX_ANSWER_CHARS} kept ---"
    )


@dataclass(frozen=True)
class Reading(Generic[Answer]):
    """One answer as read: the text stored for audit (cut marker included), what `read` made
    of it, and the failure that ends the call when no corrective follow-up can help."""

    raw_text: str
    parsed: Answer | Unreadable
    failure: JudgeFailure | None
    # Cut at the output-token limit or at MAX_ANSWER_CHARS: a follow-up would be cut again.
    truncated: bool = False


@dataclass(frozen=True)
class Shortfall(Generic[Answer]):
    """What a readable answer may leave out, and how to ask for it once: `missing(answer)` how
    much is left out (0: nothing), `follow_up(answer)` the message that asks for it."""

    missing: Callable[[Answer], int]
    follow_up: Callable[[Answer], str]


def read_completion(
    completion: Completion,
    read: Callable[[str, bool], Answer | Unreadable],
    max_output_tokens: int,
) -> Reading[Answer]:
    """Reads one answer, as the call-by-call exchange and provider batches both do: capped at
    MAX_ANSWER_CHARS, and a truncated unreadable answer is a TRUNCATED failure (the same limit
    would cut a follow-up's answer again)."""
    text, cut_marker = cap_answer(completion.text)
    truncated = completion.truncated or cut_marker is not None
    parsed = read(text, truncated)
    failure = None
    if isinstance(parsed, Unreadable) and cut_marker is not None:
        message = (
            f"answer of {len(completion.text)} characters cut at {MAX_ANSWER_CHARS} "
            f"before a usable answer: {parsed.reason}"
        )
        failure = JudgeFailure(FailureKind.TRUNCATED, message)
    elif isinstance(parsed, Unreadable) and completion.truncated:
        message = (
            f"answer cut at the output-token limit ({max_output_tokens}) "
            f"before a usable answer: {parsed.reason}"
        )
        failure = JudgeFailure(FailureKind.TRUNCATED, message)
    return Reading(text + (cut_marker or ""), parsed, failure, truncated)


def first_message(prompt: str | PromptParts) -> Message:
    """The first message of an exchange: a prompt in parts keeps where its stable part ends,
    for providers that mark it for their prompt cache."""
    if isinstance(prompt, PromptParts):
        return Message("user", prompt.text, stable_chars=len(prompt.stable))
    return Message("user", prompt)


@dataclass(frozen=True)
class RankingCall:
    """What one listwise judge call asks first, whether sent on its own or in a provider batch:
    the rendered prompt, its output cap and the answer schema (None: the prompt alone states
    the form)."""

    prompt: PromptParts
    max_output_tokens: int
    schema: AnswerSchema | None
    k: int

    def message(self) -> Message:
        return first_message(self.prompt)

    def read(self, text: str, truncated: bool) -> Ranking | Unreadable:
        return parse_ranking(text, self.k, truncated=truncated)

    def shortfall(self, answer_format: AnswerFormat) -> Shortfall[Ranking]:
        """The passages a readable ranking leaves out, asked for by number (issue 34: a small
        model ranked exactly as many as the instruction's 3-item example)."""
        return Shortfall(
            missing=lambda ranking: self.k - len(ranking.numbers),
            follow_up=lambda ranking: missing_passages_message(
                ranking.numbers, self.k, answer_format
            ),
        )


class ProviderShared:
    """State every judge of one provider shares for the server's lifetime: those on the
    server's key (`tenant` None), or those on one tenant's own key."""

    def __init__(
        self,
        provider: str,
        settings: JudgeSettings,
        limits: ProviderLimits,
        tenant: str | None = None,
    ) -> None:
        self.provider = provider
        self.tenant = tenant
        self.settings = settings
        self.provider_settings = settings.provider(provider)
        self.limits = limits
        self._breakers: dict[str, CircuitBreaker] = {}
        # Every key of the tenant's that judges on this state have used (one, unless an admin
        # replaced it while jobs ran): providers may echo a key in an error body.
        self._secrets: set[str] = set()
        # Jitter only; seeded per provider (and tenant) so a run is reproducible when timings are.
        self.rng = random.Random(provider if tenant is None else f"{provider}/{tenant}")
        self._endpoint: str | None = None

    async def canonical_endpoint(self) -> str:
        """The provider's base URL in one spelling (judges.endpoints), worked out once: its host
        name is looked up the first time, not for every job's judge."""
        if self._endpoint is None:
            base_url = self.provider_settings.base_url or ""
            loopback = await resolves_only_to_loopback(base_url)
            self._endpoint = canonical_base_url(base_url, resolves_to_loopback=loopback)
        return self._endpoint

    def hide(self, secret: str) -> None:
        """Keep `secret` out of every failure message of this state's judges."""
        self._secrets.add(secret)

    def scrub(self, error: CallError) -> CallError:
        """`error`, or a copy of it whose message no longer holds a hidden secret."""
        message = error.message
        for secret in self._secrets:
            message = message.replace(secret, REDACTED)
        if message == error.message:
            return error
        return CallError(
            error.kind, message, error.retry_after_s, provider_fault=error.provider_fault
        )

    def breaker(self, model: str) -> CircuitBreaker:
        """One breaker per model: a model a job names that keeps failing (one that the endpoint
        cannot serve) must not cut off the provider's other models for every other job."""
        if model not in self._breakers:
            self._breakers[model] = CircuitBreaker(self.provider_settings.breaker)
            metrics.BREAKERS.track(self.provider, model, self._breakers[model])
        return self._breakers[model]


class LLMJudge(Judge):
    provider: ClassVar[str]
    default_format: ClassVar[AnswerFormat]
    # Keys a job spec may put in JudgeConfig.options for this provider (and MODE_OPTION).
    known_options: ClassVar[frozenset[str]] = frozenset({"format"})

    def __init__(self, config: JudgeConfig, shared: ProviderShared) -> None:
        super().__init__(config)
        refuse_unknown_options(config.options, self.known_options | {MODE_OPTION}, self.provider)
        mode = config.options.get(MODE_OPTION, CALL_MODE)
        if mode not in (CALL_MODE, BATCH_MODE):
            raise JudgeConfigError(
                f"parameters.options.{MODE_OPTION}", f"must be {CALL_MODE} or {BATCH_MODE}"
            )
        if mode == BATCH_MODE and self.provider not in BATCH_PROVIDERS:
            raise JudgeConfigError(
                f"parameters.options.{MODE_OPTION}",
                no_batch_api(self.provider),
            )
        self.batch_mode = mode == BATCH_MODE
        if not config.model:
            raise JudgeConfigError("model", f"a model name is required for {self.provider}")
        if config.timeout_s is not None and not config.timeout_s >= MIN_TIMEOUT_S:
            raise JudgeConfigError(
                "parameters.timeout_seconds", f"must be at least {MIN_TIMEOUT_S:g} second"
            )
        try:
            self.answer_format = AnswerFormat(config.options.get("format", self.default_format))
        except ValueError:
            raise JudgeConfigError("parameters.options.format", "must be json or text") from None
        self.shared = shared
        self.passage_token_budget = config.passage_token_budget or DEFAULT_PASSAGE_TOKEN_BUDGET
        self.price = shared.settings.price(self.provider, config.model)
        # The exchanges in progress, each with the request it has in flight, if any.
        self._exchanges: set[InFlightTime] = set()

    # -- what adapters implement ------------------------------------------------------------

    @abc.abstractmethod
    async def _complete(
        self,
        messages: Sequence[Message],
        max_output_tokens: int,
        seed: int,
        schema: AnswerSchema | None,
    ) -> Completion:
        """One SDK call, asking for `schema` when given; raises CallError for any failure."""

    def _identity_extras(self, as_spelled: bool = False) -> Mapping[str, object]:
        """Provider-specific parts of the cache identity; `as_spelled`: as they were written
        before identities were canonical (see `qualification_identities`)."""
        return {}

    def _identity_model(self) -> str | None:
        """The model as the identity knows it: the name in the spec, unless the provider says
        what it serves (then None: the name is only a label)."""
        return self.config.model

    def output_allowance(self, answer_tokens: int) -> int:
        """Output tokens the provider may bill for one request whose answer needs about
        `answer_tokens`, reasoning included."""
        if self.config.max_output_tokens is not None:
            return self.config.max_output_tokens
        reasoning = DEFAULT_REASONING_TOKENS if self.config.reasoning else 0
        return answer_tokens + reasoning

    def _max_output_tokens(self, k: int) -> int:
        return self.output_allowance(default_answer_tokens(k))

    # -- the Judge interface ----------------------------------------------------------------

    @property
    def breaker_open(self) -> bool:
        return self.shared.breaker(self.config.model).is_open

    @property
    def _timeout_s(self) -> float:
        """Each request's timeout: the job's, else the provider's."""
        return self.config.timeout_s or self.shared.provider_settings.timeout_s

    def waiting(self) -> Waiting | None:
        sent = [t.sent_at for t in self._exchanges if t.sent_at is not None]
        if not sent:
            return None
        retry = self.shared.provider_settings.retry
        return Waiting(min(sent), time_limit_s(retry, self._timeout_s))

    def cache_identity(self) -> str:
        return self.identity(TEMPLATE_VERSION)

    def qualification_identities(self) -> list[str]:
        """The judge identity, then those its earlier qualifications may be stored under: the
        same judge asked with a template its qualifications carry over from, and identities as
        spelled before they were canonical (the endpoint as written, the model's label)."""
        earlier = [
            self.identity(template, as_spelled=True)
            for template in (TEMPLATE_VERSION, *QUALIFICATIONS_CARRY_OVER_FROM)
        ]
        return list(dict.fromkeys([self.judge_identity(), *earlier]))

    def identity(self, template: str, *, as_spelled: bool = False) -> str:
        """This judge's model and parameters, with the version of the prompt it is asked."""
        identity = {
            "provider": self.provider,
            "model": self.config.model if as_spelled else self._identity_model(),
            "temperature": self.config.temperature,
            "max_output_tokens": self.config.max_output_tokens,
            "reasoning": self.config.reasoning,
            # How calls travel (one by one, or in a provider batch) does not change the answer.
            "options": dict(
                sorted((k, v) for k, v in self.config.options.items() if k != MODE_OPTION)
            ),
            "answer_format": str(self.answer_format),
            "passage_token_budget": self.passage_token_budget,
            "template": template,
            **self._identity_extras(as_spelled),
        }
        return json.dumps(identity, sort_keys=True, separators=(",", ":"))

    def estimate(self, request: BatchRequest) -> JudgeUsage:
        return self.estimate_at(request, self.price)

    def estimate_at(self, request: BatchRequest, price: Price | None) -> JudgeUsage:
        """`estimate` with tokens charged at `price` (a provider batch's)."""
        k = len(request.passages)
        prompt = self._render(request)
        # The longer of the two follow-ups a call may send.
        follow_up = max(
            corrective_message("x" * 200, self.answer_format, k),
            missing_passages_message((), k, self.answer_format),
            key=len,
        )
        return self.worst_case(
            prompt.text,
            self._max_output_tokens(k),
            follow_up,
            cache_writes=self.cache_write_bound(prompt),
            price=price,
        )

    def cache_write_bound(self, prompt: PromptParts) -> int:
        """At most how many of an exchange's prompt tokens the provider may write to its prompt
        cache, which it charges above the input price: none, unless the adapter marks a part
        of `prompt` for caching."""
        return 0

    def worst_case(
        self,
        prompt: str,
        max_output: int,
        corrective: str,
        cache_writes: int = 0,
        price: Price | None = None,
    ) -> JudgeUsage:
        """Upper bound of an exchange: the prompt and a corrective follow-up that repeats it
        with a full-length first answer, each answered with the maximum output; `cache_writes`
        of its input tokens at the cache-write price; at `price`, else the judge's own."""
        follow_up = upper_bound_tokens(corrective)
        first_input = upper_bound_tokens(prompt)
        tokens = TokenCounts(
            input=first_input + (first_input + max_output + follow_up),
            output=2 * max_output,
        )
        tokens = replace(tokens, cache_write=min(cache_writes, tokens.input))
        return JudgeUsage(
            input_tokens=tokens.input,
            output_tokens=tokens.output,
            cost_usd=cost_usd(tokens, price or self.price),
        )

    def ranking_call(self, request: BatchRequest) -> RankingCall:
        k = len(request.passages)
        return RankingCall(
            prompt=self._render(request),
            max_output_tokens=self._max_output_tokens(k),
            schema=RANKING_SCHEMA if self.answer_format is AnswerFormat.JSON else None,
            k=k,
        )

    async def judge(self, request: BatchRequest) -> JudgeReply:
        call = self.ranking_call(request)
        exchange = await self.exchange(
            call.prompt,
            read=call.read,
            corrective=lambda reason: corrective_message(reason, self.answer_format, call.k),
            shortfall=call.shortfall(self.answer_format),
            max_output_tokens=call.max_output_tokens,
            schema=call.schema,
            seed=request.seed,
            deadline=request.deadline,
            call_id=request.call_id,
        )
        ranking = exchange.answer
        ordering = tuple(request.passages[n - 1].id for n in ranking.numbers) if ranking else ()
        return JudgeReply(
            ordering, exchange.usage, exchange.failure, exchange.prompt, exchange.raw_text
        )

    def reply_to(
        self, request: BatchRequest, completion: Completion, price: Price | None
    ) -> JudgeReply:
        """The reply to `request` from an answer that came outside the exchange (a provider
        batch's result), read as the exchange reads a first answer and charged at `price`. An
        unreadable answer fails as UNPARSEABLE: its corrective follow-up would be a call of
        its own, which the caller may make (the batch answer's tokens are already spent)."""
        call = self.ranking_call(request)
        reading = read_completion(completion, call.read, call.max_output_tokens)
        usage = JudgeUsage(
            input_tokens=completion.tokens.input,
            output_tokens=completion.tokens.output,
            cached_input_tokens=completion.tokens.cached_input,
            cache_write_input_tokens=completion.tokens.cache_write,
            cost_usd=cost_usd(completion.tokens, price),
        )
        failure = reading.failure
        if isinstance(reading.parsed, Unreadable):
            failure = failure or JudgeFailure(
                FailureKind.UNPARSEABLE, f"unreadable batch answer: {reading.parsed.reason}"
            )
            return JudgeReply((), usage, failure, call.prompt.text, reading.raw_text)
        ordering = tuple(request.passages[n - 1].id for n in reading.parsed.numbers)
        return JudgeReply(ordering, usage, None, call.prompt.text, reading.raw_text)

    async def exchange(
        self,
        prompt: str | PromptParts,
        *,
        read: Callable[[str, bool], Answer | Unreadable],
        corrective: Callable[[str], str],
        max_output_tokens: int,
        schema: AnswerSchema | None,
        seed: int,
        deadline: float | None,
        call_id: str = "",
        shortfall: Shortfall[Answer] | None = None,
    ) -> Exchange[Answer]:
        """Ask `prompt`, read the answer with `read(text, truncated)`, and send one follow-up:
        corrective (`corrective(reason)`) if it cannot be read, or asking for what it left out
        (`shortfall`) if it is readable but incomplete. Listwise and pointwise judging share
        it, so both get the same limits, retries, breaker, truncation rule, usage and span
        (server/observability/genai.py; `call_id` names the job's call in it)."""
        with chat_span(
            self.provider,
            self.config.model,
            system=PROVIDERS_BY_NAME[self.provider].genai_system,
            call_id=call_id,
            max_tokens=max_output_tokens,
            temperature=self.config.temperature,
            seed=seed,
            output_type=str(self.answer_format),
            server_address=urllib.parse.urlsplit(
                self.shared.provider_settings.base_url or ""
            ).hostname
            or "",
        ) as span:
            # Kept while it lasts: its request in flight is one `waiting` may report.
            in_flight = InFlightTime()
            self._exchanges.add(in_flight)
            try:
                return await self._exchange(
                    prompt,
                    read,
                    corrective,
                    shortfall,
                    max_output_tokens,
                    schema,
                    seed,
                    deadline,
                    span,
                    in_flight,
                )
            finally:
                self._exchanges.discard(in_flight)

    async def _exchange(
        self,
        prompt: str | PromptParts,
        read: Callable[[str, bool], Answer | Unreadable],
        corrective: Callable[[str], str],
        shortfall: Shortfall[Answer] | None,
        max_output_tokens: int,
        schema: AnswerSchema | None,
        seed: int,
        deadline: float | None,
        span: ChatSpan,
        in_flight: InFlightTime,
    ) -> Exchange[Answer]:
        messages = [first_message(prompt)]
        prompt_text = messages[0].text
        spent = TokenCounts()
        answers: list[str] = []
        # A readable first answer that left something out: it stands unless the follow-up
        # that asks for the rest brings a more complete one.
        incomplete: Answer | None = None

        def done(answer: Answer | None = None, failure: JudgeFailure | None = None) -> Exchange:
            usage = JudgeUsage(
                input_tokens=spent.input,
                output_tokens=spent.output,
                cached_input_tokens=spent.cached_input,
                cache_write_input_tokens=spent.cache_write,
                cost_usd=cost_usd(spent, self.price),
                latency_s=in_flight.seconds,
            )
            self._observe(in_flight)
            span.ended(
                input_tokens=spent.input,
                output_tokens=spent.output,
                cache_read_input_tokens=spent.cached_input,
                cache_creation_input_tokens=spent.cache_write,
                answers=answers,
                failure_kind=str(failure.kind) if failure else None,
                requests=in_flight.requests,
                retries=in_flight.retries,
                waited_s=in_flight.waited_s,
                breaker_state=self.shared.breaker(self.config.model).state,
            )
            return Exchange(answer, failure, usage, prompt_text, RAW_TEXT_SEPARATOR.join(answers))

        for is_follow_up in (False, True):
            span.sent([(m.role, m.text) for m in messages])
            try:
                completion = await self._call(
                    messages, max_output_tokens, schema, seed, deadline, in_flight
                )
            except CallError as error:
                if incomplete is not None:
                    return done(answer=incomplete)
                return done(failure=JudgeFailure(error.kind, error.message))
            span.answered(
                completion.response_id, completion.response_model, completion.finish_reason
            )
            spent += completion.tokens
            reading = read_completion(completion, read, max_output_tokens)
            answers.append(reading.raw_text)
            parsed = reading.parsed
            if incomplete is not None:  # the answer to the follow-up asking for the rest
                assert shortfall is not None  # only a shortfall makes an answer incomplete
                if isinstance(parsed, Unreadable) or shortfall.missing(parsed) >= shortfall.missing(
                    incomplete
                ):
                    return done(answer=incomplete)
                return done(answer=parsed)
            if not isinstance(parsed, Unreadable):
                if shortfall is None or reading.truncated or not shortfall.missing(parsed):
                    return done(answer=parsed)
                incomplete = parsed
                messages += [
                    Message("assistant", completion.text),
                    Message("user", shortfall.follow_up(parsed)),
                ]
                continue
            if reading.failure is not None:
                return done(failure=reading.failure)
            if is_follow_up:
                message = f"unreadable after one corrective follow-up: {parsed.reason}"
                return done(failure=JudgeFailure(FailureKind.UNPARSEABLE, message))
            messages += [
                Message("assistant", completion.text),
                Message("user", corrective(parsed.reason)),
            ]
        raise AssertionError("unreachable: the loop returns on its second pass")

    # -- helpers ------------------------------------------------------------------------------

    def _observe(self, in_flight: InFlightTime) -> None:
        """A finished call's waits for slots and its requests sent again, as series."""
        model = metrics.model_label(self.provider, self.config.model)
        metrics.JUDGE_WAIT.labels(self.provider, model).observe(in_flight.waited_s)
        if in_flight.retries:
            metrics.JUDGE_RETRIES.labels(self.provider, model).inc(in_flight.retries)

    def _render(self, request: BatchRequest) -> PromptParts:
        return render_prompt_parts(
            request.query,
            request.rubric,
            request.passages,
            self.answer_format,
            self.passage_token_budget,
        )

    async def _call(
        self,
        messages: Sequence[Message],
        max_output: int,
        schema: AnswerSchema | None,
        seed: int,
        deadline: float | None,
        in_flight: InFlightTime,
    ) -> Completion:
        shared = self.shared
        # Providers count a request's max output against the token rate limit up front.
        tokens = sum(estimate_tokens(m.text) for m in messages) + max_output
        provider_timeout_s = shared.provider_settings.timeout_s

        async def send() -> Completion:
            try:
                return await self._complete(messages, max_output, seed, schema)
            except CallError as error:  # the adapters' SDK errors, mapped in sdk_errors
                # Scrubbed here, before the breaker keeps it as the last failure it shows.
                raise shared.scrub(error) from None

        return await call_with_retries(
            send,
            slot=lambda: shared.limits.slot(self.provider, self.config.model, tokens),
            policy=shared.provider_settings.retry,
            timeout_s=self._timeout_s,
            provider_timeout_s=provider_timeout_s,
            deadline=deadline,
            breaker=shared.breaker(self.config.model),
            rng=shared.rng,
            in_flight=in_flight,
        )
