"""The tournament state machine: plan judge calls, record verdicts, report tiers and when to stop.

Deterministic: the calls planned depend only on the candidate ids and their order, the config
(seed included), the sequence of plan/record/disable_judge calls and the estimates returned.
The server rebuilds a job after a crash by replaying that sequence and relies on getting the
same calls back from the same PLANNER_VERSION; a job planned by another version is rebuilt by
adopting the calls it recorded instead.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tierank.scheduler.bias import PositionBias, PositionBiasMeter
from tierank.scheduler.ensemble import (
    Batch,
    contested_pairs,
    presentation_order,
    wants_another_judge,
)
from tierank.scheduler.graph import MajorityGraph, Standings, bits_of
from tierank.scheduler.ordering import tiers_best_first
from tierank.scheduler.positions import ShownOrder
from tierank.scheduler.selection import (
    BatchStrategy,
    FrontierStrategy,
    SelectionView,
    partition_in_prior_order,
)
from tierank.scheduler.strength import FINAL_SWEEPS, PROVISIONAL_SWEEPS, Strengths
from tierank.scheduler.types import (
    Budget,
    Cost,
    JudgeCall,
    StopReason,
    Tier,
    TournamentConfig,
    Verdict,
)
from tierank.scheduler.votes import VoteTally

# Bump whenever the calls `plan` returns for the same inputs change (batch choice, judges,
# presentation order, call ids, depth): the server replays a journal planned by the same version
# exactly, and resumes one planned by another (a rolling upgrade) from its recorded calls.
# 2: batches are presented with balanced positions (TournamentConfig.balance_positions).
# 3: a budget too small for the default plan shows the first-stage head first (_fit_first_wave).
PLANNER_VERSION = 3

# How many batches may show a pair while its relation is still open. Re-asking can break an
# exact tie (a noisy judge that answered both ways equally often), but judges that split evenly
# every time would tie forever; the cap guarantees the tournament ends.
MAX_ASKS_PER_PAIR = 5

# Adaptive ensembles in top-K mode: first-wave batches lying wholly beyond the first
# SCREENING_HEAD_FACTOR * K candidates of the first-stage order go to one judge (the quorum
# judges take turns), the rest to the quorum. The top-K comes mostly from the head of the
# retrieval order; in the tail one judge's verdict is enough to screen out the many candidates
# that cannot reach it, and the survivors meet the quorum in later batches. Measured with other
# heads in bench/ranking/RESULTS.md ("Why the scheduler's constants are what they are"), as are
# the constants below.
SCREENING_HEAD_FACTOR = 3

# A budget too small for the default plan is planned for from the start: the first wave shows
# only as much of the first-stage head as leaves this share of its own cost for the rounds that
# sort out the top-K, and the rest of the pool is shown only once those rounds run out of work
# (bench/ranking/CURVE.md shows what each budget buys).
REFINEMENT_RESERVE = 0.5

# Members of a tier are tied, but many users need one list: a tier lists them by net wins
# inside it (Copeland), each place in the first-stage order counting as 1/N of a net win. Net
# wins alone overfit a noisy judge's few direct answers; first-stage order alone ignores them;
# Bradley–Terry strengths (which order the tiers) did worse inside a weak judge's cycles.
FIRST_STAGE_PLACES_PER_NET_WIN = 5

# The first-stage order's lean in the strength model (scheduler/strength.py): the first
# candidate wins 0.5 + lean/2 of its game against the anchor, the last 0.5 - lean/2.
FIRST_STAGE_PRIOR_LEAN = 0.5


def one_call(_: JudgeCall) -> Cost:
    return Cost(calls=1)


@dataclass(frozen=True)
class _Progress:
    """Standings plus what they mean for the target (top-K or full order)."""

    standings: Standings
    # Candidates that can still be in the top-K (everyone in full mode).
    contenders: int
    # Per component: contenders whose relation to it is still unknown.
    needed: tuple[int, ...]
    # Settled: relation to every other candidate known, or (top-K mode) provably outside it.
    settled: int


@dataclass(frozen=True)
class _Proposal:
    batch_id: int
    members: tuple[int, ...]
    judge: int
    # None for a new batch.
    existing: Batch | None
    from_first_wave: bool
    # Judges the batch goes to before any escalation.
    wanted_judges: int


@dataclass(frozen=True)
class _Planned:
    call: JudgeCall
    batch: Batch
    reservation: Cost


class Tournament:
    """Settle the tiers of `candidate_ids` (in first-stage order) with k-wise judge calls.

    In top-K mode a candidate also counts as settled once at least K candidates are known
    above it: it provably cannot reach the top-K, its tier's place below the top-K is final for
    the target, and its order among the other outsiders is provisional.
    """

    def __init__(
        self,
        candidate_ids: Sequence[str],
        config: TournamentConfig,
        strategy: BatchStrategy | None = None,
    ) -> None:
        _validate(candidate_ids, config)
        self._ids = tuple(candidate_ids)
        self._index = {candidate: index for index, candidate in enumerate(self._ids)}
        self._config = config
        self._strategy = strategy or FrontierStrategy()
        self._judge_count = len(config.judge_weights)
        self._active = [True] * self._judge_count
        self._tally = VoteTally(config.judge_weights)
        self._strengths = Strengths(len(self._ids), FIRST_STAGE_PRIOR_LEAN)
        self._graph = MajorityGraph(len(self._ids))
        self._progress_cache: _Progress | None = None
        # Keyed by whether the order is final (see `tiers`).
        self._strength_cache: dict[bool, list[float]] = {}
        # The server asks for the tiers after every batch of verdicts; most verdicts move few
        # tiers, so unchanged ones are reused (same objects: comparing lists is then cheap).
        self._tiers_cache: dict[bool, list[Tier]] = {}
        self._tier_by_key: dict[tuple[int, tuple[int, ...], bool], Tier] = {}
        self._listed_cache: tuple[_Progress, list[tuple[tuple[int, ...], bool]]] | None = None
        self._first_wave = deque(
            self._strategy.first_wave(len(self._ids), config.batch_size, config.top_k)
        )
        # First-wave batches held back until the shown candidates need no more calls: a budget
        # too small for the whole pool goes to its head first (see `_fit_first_wave`).
        self._deferred: deque[tuple[int, ...]] = deque()
        self._first_wave_fitted = False
        self._open_batches: dict[int, Batch] = {}
        self._busy = 0
        self._next_batch_id = 0
        # Per number of asks n (1..MAX_ASKS_PER_PAIR), per candidate: the partners shown with it
        # while their relation was open in at least n batches. The last level is the capped pairs.
        self._asks_at_least = [[0] * len(self._ids) for _ in range(MAX_ASKS_PER_PAIR)]
        # Pairs (low, high) an adaptive quorum has disagreed on, in any batch so far.
        self._disputed: set[tuple[int, int]] = set()
        self._capped = self._asks_at_least[-1]
        # Candidates any batch has shown; first-wave batches adopted calls already showed are
        # not planned again.
        self._shown = 0
        self._outstanding: dict[str, _Planned] = {}
        self._planned_ids: set[str] = set()
        self._reserved = Cost()
        self._spent = Cost()
        self._critical_path = 0
        self._estimate: Callable[[JudgeCall], Cost] = one_call
        self._shown_order = ShownOrder()
        self._position_bias = [PositionBiasMeter() for _ in range(self._judge_count)]
        # Derived state kept until what it follows from changes (None: to compute): whether
        # the votes are trusted (`_trusted`), and the next call to plan with the call it makes,
        # which `stop_reason` works out and `plan` then takes (`_upcoming_call`).
        self._trusted_now: bool | None = None
        self._upcoming: tuple[_Proposal, JudgeCall] | None = None

    # -- public surface -------------------------------------------------------------------

    def plan(self, estimate: Callable[[JudgeCall], Cost] | None = None) -> list[JudgeCall]:
        """New calls for the free in-flight slots; [] when there is nothing to do now.

        Each call's `estimate` (default: one call) is reserved against the budget until its
        verdict settles it; a call whose reservation would exceed the budget is not planned.
        """
        self._estimate = estimate or one_call
        if self._target_settled() or not any(self._active):
            return []
        if not self._first_wave_fitted:
            self._fit_first_wave()
        planned = []
        while len(self._outstanding) < self._config.max_in_flight:
            upcoming = self._upcoming_call()
            if upcoming is None:
                break
            proposal, call = upcoming
            reservation = self._estimate(call)
            if not self._affordable(reservation):
                break
            self._commit(proposal, call, reservation)
            planned.append(call)
        return planned

    def adopt(
        self, calls: Sequence[JudgeCall], estimate: Callable[[JudgeCall], Cost] | None = None
    ) -> None:
        """Take over calls planned before, possibly under other rules (an older planner):
        their verdicts can then be recorded, and later plans follow on from them.

        A call joins its batch if that is open, else opens it from the presented candidates;
        batch ids continue after the highest adopted. A first-wave batch the adopted calls have
        wholly shown is not planned again. Each call's `estimate` is reserved whatever the
        budget: the call has already been made.
        """
        self._estimate = estimate or one_call
        self._upcoming = None
        # Adopted calls were planned for the whole pool; the plan goes on from them unchanged.
        self._first_wave_fitted = True
        first_wave = set(self._first_wave)
        for call in calls:
            members = self._adopted_members(call)
            batch = self._open_batches.get(call.batch)
            if batch is None:
                new = call.batch >= self._next_batch_id
                wanted = self._wanted_judges(members, from_first_wave=members in first_wave)
                batch = self._open(Batch(call.batch, members, wanted), count_asks=new)
            elif batch.members != members:
                raise ValueError(f"call {call.call_id!r} does not present batch {call.batch}")
            self._take(call, batch, self._estimate(call))
            batch.wanted_judges = max(batch.wanted_judges, len(batch.asked))
        self._first_wave = deque(
            members
            for members in self._first_wave
            if any(not self._shown >> m & 1 for m in members)
        )

    def record(self, verdict: Verdict) -> None:
        """Absorb a verdict; a failed one adds no votes, a partial one only the pairs it states."""
        planned = self._outstanding.get(verdict.call_id)
        if planned is None:
            state = "already recorded" if verdict.call_id in self._planned_ids else "unknown"
            raise ValueError(f"call {verdict.call_id!r} is {state}")
        ordering = () if verdict.failed else self._validated_ordering(planned.call, verdict)

        self._upcoming = None
        del self._outstanding[verdict.call_id]
        self._reserved -= planned.reservation
        self._spent += verdict.cost
        self._critical_path = max(self._critical_path, planned.call.depth)
        batch = planned.batch
        batch.outstanding -= 1
        if len(ordering) >= 2:
            self._position_bias[planned.call.judge].add(planned.call.presented, verdict.ordering)
            self._trusted_now = None
            changes = self._tally.add_ordering(planned.call.judge, ordering)
            self._strengths.add_ordering(ordering, self._config.judge_weights[planned.call.judge])
            if changes:
                self._graph.apply(changes)
                self._progress_cache = None
            # Every vote moves the strengths, and with them the order of open tiers.
            self._strength_cache.clear()
            self._tiers_cache.clear()
            batch.verdicts.append((planned.call.judge, ordering))
        if self._should_escalate(batch):
            batch.wanted_judges += 1
        self._close_if_done(batch)

    def disable_judge(self, judge: int) -> None:
        """Stop planning calls to `judge` (its circuit breaker opened)."""
        if not 0 <= judge < self._judge_count:
            raise ValueError(f"no judge {judge}")
        self._upcoming = None
        self._active[judge] = False
        for batch in list(self._open_batches.values()):
            self._close_if_done(batch)

    def tiers(self, final: bool = False) -> list[Tier]:
        """Strongly connected components of the majority graph, best first: every relation
        the graph knows is kept, and tiers whose relation is open go by the strength of all
        votes so far (scheduler/ordering.py), so the order is the best estimate at any time.

        `final`: the order a job ends with, from a finer fit of the strengths than the
        provisional orders listed while it runs (scheduler/strength.py says why).
        """
        if final not in self._tiers_cache:
            self._tiers_cache[final] = self._current_tiers(final)
        return list(self._tiers_cache[final])

    def stop_reason(self) -> StopReason | None:
        """Why the job should end now, or None while there is more to do or to wait for.

        SETTLED holds even with calls in flight (the runner cancels them); the budget and
        exhaustion only end a job once nothing is in flight, since a pending verdict may still
        settle it or free budget.
        """
        if self._target_settled():
            return StopReason.SETTLED if self._trusted() else StopReason.POSITION_BIASED
        if not any(self._active):
            return StopReason.JUDGES_UNAVAILABLE
        if self._outstanding:
            return None
        upcoming = self._upcoming_call()
        if upcoming is None:
            return StopReason.EXHAUSTED
        if not self._affordable(self._estimate(upcoming[1])):
            return StopReason.BUDGET_EXHAUSTED
        return None

    @property
    def config(self) -> TournamentConfig:
        return self._config

    @property
    def in_flight(self) -> frozenset[str]:
        return frozenset(self._outstanding)

    @property
    def spent(self) -> Cost:
        """Actual usage of recorded calls."""
        return self._spent

    @property
    def reserved(self) -> Cost:
        """Estimated usage of calls in flight."""
        return self._reserved

    @property
    def critical_path(self) -> int:
        """Sequential judge round-trips: the largest depth among recorded calls."""
        return self._critical_path

    @property
    def settled_count(self) -> int:
        return self._progress().settled.bit_count() if self._trusted() else 0

    def position_bias(self) -> list[PositionBias]:
        """Per judge: how far its answers follow the positions it was shown (scheduler/bias.py)."""
        return [meter.reading() for meter in self._position_bias]

    @property
    def total(self) -> int:
        return len(self._ids)

    def votes_for(self, winner: str, loser: str) -> float:
        """Total judge weight of the votes stating `winner` is better than `loser`."""
        return self._tally.wins(self._index[winner], self._index[loser])

    def judge_agreement(self) -> list[float | None]:
        """Per judge: share of its stated pairs that agree with the weighted majority now.

        Pairs the majority leaves tied count as not agreeing. None for a judge with no pairs.
        """
        return [self._tally.agreement(judge) for judge in range(self._judge_count)]

    # -- state derived from the votes -----------------------------------------------------

    def _progress(self) -> _Progress:
        if self._progress_cache is None:
            self._progress_cache = _progress_of(self._graph.standings(), self._config.top_k)
        return self._progress_cache

    def _strength(self, final: bool) -> list[float]:
        if final not in self._strength_cache:
            sweeps = FINAL_SWEEPS if final else PROVISIONAL_SWEEPS
            self._strength_cache[final] = self._strengths.fit(sweeps)
        return self._strength_cache[final]

    def _current_tiers(self, final: bool) -> list[Tier]:
        progress = self._progress()
        strength = self._strength(final)
        listed = self._listed_components(progress)
        trusted = self._trusted()
        tiers, by_key = [], {}
        known, ids = self._tier_by_key, self._ids
        for rank, component in enumerate(tiers_best_first(progress.standings, strength), start=1):
            members, settled = listed[component]
            key = (rank, members, trusted and settled)
            tier = known.get(key)
            if tier is None:
                tier = Tier(rank=rank, members=tuple(ids[m] for m in members), settled=key[2])
            tiers.append(tier)
            by_key[key] = tier
        self._tier_by_key = by_key
        return tiers

    def _listed_components(self, progress: _Progress) -> list[tuple[tuple[int, ...], bool]]:
        """Per component of `progress`: its members best first, and whether it is settled.

        Both follow from the majority graph alone, so they are kept while it is unchanged:
        the server lists the tiers again after votes that moved only the strengths.
        """
        cached = self._listed_cache
        if cached is not None and cached[0] is progress:
            return cached[1]
        standings, settled = progress.standings, progress.settled
        listed = []
        for members, bits in zip(
            standings.component_members, standings.component_bits, strict=True
        ):
            if len(members) > 1:
                members = self._best_first(members, bits)
            listed.append((members, not bits & ~settled))
        self._listed_cache = (progress, listed)
        return listed

    def _best_first(self, members: tuple[int, ...], bits: int) -> tuple[int, ...]:
        """A tier's members, by net wins inside it with the first-stage order as a prior."""
        places = FIRST_STAGE_PLACES_PER_NET_WIN
        return tuple(
            sorted(
                members,
                key=lambda m: (m - places * self._graph.net_wins(m, bits), m),
            )
        )

    def _trusted(self) -> bool:
        """Whether the votes include some from a judge not flagged for following positions:
        votes from flagged judges alone settle nothing (their tiers stay provisional)."""
        if self._trusted_now is None:
            # A judge's meter counts every verdict that gave votes (an ordering of two or more).
            voters = [r for r in (m.reading() for m in self._position_bias) if r.verdicts]
            self._trusted_now = not voters or any(not r.flagged for r in voters)
        return self._trusted_now

    def _target_settled(self) -> bool:
        return self._progress().settled.bit_count() == len(self._ids)

    def _selection_view(self) -> SelectionView:
        progress = self._progress()
        needed, component_of = progress.needed, progress.standings.component_of
        deferred = bits_of(member for members in self._deferred for member in members)
        if deferred:
            open_partners = [
                0
                if deferred >> candidate & 1
                else needed[component_of[candidate]] & ~capped & ~deferred
                for candidate, capped in enumerate(self._capped)
            ]
        else:
            open_partners = [
                needed[component] & ~capped
                for component, capped in zip(component_of, self._capped, strict=True)
            ]
        return SelectionView(
            batch_size=self._config.batch_size,
            standings=progress.standings,
            open_partners=open_partners,
            busy=self._busy,
        )

    # -- planning -------------------------------------------------------------------------

    def _upcoming_call(self) -> tuple[_Proposal, JudgeCall] | None:
        """The next call to plan and its proposal, kept until the state changes: the runner
        asks `stop_reason` (which needs the call's cost) and then plans it."""
        if self._upcoming is None:
            proposal = self._next_proposal()
            if proposal is None:
                return None
            self._upcoming = (proposal, self._call_for(proposal))
        return self._upcoming

    def _next_proposal(self) -> _Proposal | None:
        """The next call to plan, without changing any state."""
        for batch in self._open_batches.values():
            judge = self._next_judge(batch) if len(batch.asked) < batch.wanted_judges else None
            if judge is not None:
                return _Proposal(
                    batch.batch_id, batch.members, judge, batch, False, batch.wanted_judges
                )
        if not any(self._active):
            return None
        batch_id = self._next_batch_id
        if self._first_wave:
            members = self._first_wave[0]
            wanted = self._wanted_judges(members, from_first_wave=True)
            judge = self._first_judge(batch_id, wanted)
            return _Proposal(batch_id, members, judge, None, True, wanted)
        chosen = self._strategy.next_batch(self._selection_view())
        if chosen is None:
            if not self._deferred or self._outstanding:
                return None
            members = self._deferred[0]
            wanted = self._wanted_judges(members, from_first_wave=True)
            return _Proposal(
                batch_id, members, self._first_judge(batch_id, wanted), None, True, wanted
            )
        members = tuple(sorted(chosen))
        wanted = self._wanted_judges(members, from_first_wave=False)
        return _Proposal(
            batch_id, members, self._first_judge(batch_id, wanted), None, False, wanted
        )

    def _fit_first_wave(self) -> None:
        """Where the budget cannot pay for the whole first wave and REFINEMENT_RESERVE of it
        besides, the first wave covers the longest first-stage head it can pay for with that
        reserve kept; the rest of the pool waits in deferred batches."""
        self._first_wave_fitted = True
        self._upcoming = None
        budget = self._config.budget
        scaled = Budget(
            max_calls=int(budget.max_calls / (1 + REFINEMENT_RESERVE)),
            max_input_tokens=int(budget.max_input_tokens / (1 + REFINEMENT_RESERVE)),
            max_cost_usd=budget.max_cost_usd / (1 + REFINEMENT_RESERVE),
        )
        if scaled == Budget() or scaled.allows(self._first_wave_cost(self._first_wave)):
            return
        size, batch_size, top_k = len(self._ids), self._config.batch_size, self._config.top_k
        # The longest head whose first wave the scaled budget allows (costs grow with the head).
        low, high = min(size, 2), size
        while low < high:
            middle = (low + high + 1) // 2
            head = self._strategy.first_wave(middle, batch_size, top_k)
            if scaled.allows(self._first_wave_cost(head)):
                low = middle
            else:
                high = middle - 1
        self._first_wave = deque(self._strategy.first_wave(low, batch_size, top_k))
        self._deferred = deque(
            tuple(low + member for member in members)
            for members in partition_in_prior_order(size - low, batch_size)
        )

    def _first_wave_cost(self, batches: Sequence[tuple[int, ...]]) -> Cost:
        judge = next(j for j in range(self._judge_count) if self._active[j])
        total = Cost()
        for members in batches:
            presented = tuple(self._ids[m] for m in members)
            total += self._estimate(JudgeCall("", -1, judge, presented, depth=1))
        return total

    def _wanted_judges(self, members: tuple[int, ...], from_first_wave: bool) -> int:
        """How many judges a new batch goes to before any escalation."""
        if self._config.ensemble == "all":
            return self._judge_count
        top_k = self._config.top_k
        if from_first_wave and top_k and members[0] >= SCREENING_HEAD_FACTOR * top_k:
            return 1
        return self._config.quorum

    def _first_judge(self, batch_id: int, wanted: int) -> int:
        """The first judge of a new batch; a screening batch takes the quorum judges in turn."""
        preference: Sequence[int] = range(self._judge_count)
        if wanted == 1:
            turns = min(self._config.quorum, self._judge_count)
            first = batch_id % turns
            preference = [first, *(j for j in range(self._judge_count) if j != first)]
        return next(j for j in preference if self._active[j])

    def _next_judge(self, batch: Batch) -> int | None:
        return next(
            (j for j in range(self._judge_count) if self._active[j] and j not in batch.asked),
            None,
        )

    def _call_for(self, proposal: _Proposal) -> JudgeCall:
        order = presentation_order(
            proposal.members, self._config.seed, proposal.batch_id, proposal.judge
        )
        if self._config.balance_positions:
            order = self._shown_order.balanced(order)
        return JudgeCall(
            call_id=f"b{proposal.batch_id}.j{proposal.judge}",
            batch=proposal.batch_id,
            judge=proposal.judge,
            presented=tuple(self._ids[m] for m in order),
            depth=self._critical_path + 1,
        )

    def _affordable(self, reservation: Cost) -> bool:
        return self._config.budget.allows(self._spent + self._reserved + reservation)

    def _commit(self, proposal: _Proposal, call: JudgeCall, reservation: Cost) -> None:
        self._upcoming = None
        batch = proposal.existing
        if batch is None:
            batch = Batch(proposal.batch_id, proposal.members, proposal.wanted_judges)
            self._open(batch, count_asks=True)
            if proposal.from_first_wave:
                (self._first_wave or self._deferred).popleft()
        self._take(call, batch, reservation)

    def _open(self, batch: Batch, count_asks: bool) -> Batch:
        self._open_batches[batch.batch_id] = batch
        self._next_batch_id = max(self._next_batch_id, batch.batch_id + 1)
        self._busy |= batch.bits
        self._shown |= batch.bits
        if count_asks:
            self._count_asks(batch.members)
        return batch

    def _take(self, call: JudgeCall, batch: Batch, reservation: Cost) -> None:
        self._shown_order.record([self._index[c] for c in call.presented])
        batch.asked.append(call.judge)
        batch.outstanding += 1
        self._outstanding[call.call_id] = _Planned(call, batch, reservation)
        self._planned_ids.add(call.call_id)
        self._reserved += reservation

    def _adopted_members(self, call: JudgeCall) -> tuple[int, ...]:
        """The batch members (first-stage order) of a call to adopt, which must be one this
        tournament could have planned."""
        if call.call_id in self._planned_ids:
            raise ValueError(f"call {call.call_id!r} is already planned")
        if not 0 <= call.judge < self._judge_count:
            raise ValueError(f"call {call.call_id!r} names no judge {call.judge}")
        strangers = [c for c in call.presented if c not in self._index]
        if strangers or len(set(call.presented)) != len(call.presented):
            raise ValueError(f"call {call.call_id!r} presents unknown or repeated ids")
        return tuple(sorted(self._index[c] for c in call.presented))

    def _count_asks(self, members: tuple[int, ...]) -> None:
        # Only open pairs count: a known pair shown again beside open ones was not re-asked,
        # and counting it could cap a pair that later becomes a tie before it was ever retried.
        # Whether a pair is open is symmetric (needed[component of a] holds b iff
        # needed[component of b] holds a), so each member's row counts the same pairs.
        progress = self._progress()
        needed, component_of = progress.needed, progress.standings.component_of
        batch = bits_of(members)
        levels = self._asks_at_least
        for member in members:
            asked = needed[component_of[member]] & batch
            if not asked:
                continue
            # A pair asked at least n - 1 times before is now asked at least n times.
            for level in range(len(levels) - 1, 0, -1):
                levels[level][member] |= levels[level - 1][member] & asked
            levels[0][member] |= asked

    # -- recording ------------------------------------------------------------------------

    def _validated_ordering(self, call: JudgeCall, verdict: Verdict) -> tuple[int, ...]:
        presented = set(call.presented)
        strangers = [c for c in verdict.ordering if c not in presented]
        if strangers:
            raise ValueError(f"verdict {verdict.call_id!r} ranks ids not presented: {strangers}")
        if len(set(verdict.ordering)) != len(verdict.ordering):
            raise ValueError(f"verdict {verdict.call_id!r} ranks an id twice")
        return tuple(self._index[c] for c in verdict.ordering)

    def _should_escalate(self, batch: Batch) -> bool:
        if self._config.ensemble != "adaptive" or batch.outstanding:
            return False
        if len(batch.asked) < batch.wanted_judges:
            return False
        progress = self._progress()
        contenders, head = progress.contenders, self._current_head(progress.standings)

        def matters(a: int, b: int) -> bool:
            # Another judge is worth asking only where the votes so far leave the pair open
            # and where its answer can move someone in or out of the current top-K.
            return bool(
                contenders >> a & 1
                and contenders >> b & 1
                and (head >> a | head >> b) & 1
                and not self._tally.direction(a, b)
            )

        contested = {pair for pair in contested_pairs(batch.verdicts) if matters(*pair)}
        escalate = wants_another_judge(
            batch, self._config.quorum, self._config.judge_weights, contested, self._disputed
        )
        self._disputed |= contested
        return escalate

    def _current_head(self, standings: Standings) -> int:
        """The candidates placed in the top-K by the standings now (everyone in full mode)."""
        top_k = self._config.top_k
        if not top_k:
            return (1 << standings.size) - 1
        head, placed = 0, 0
        for component in standings.components_best_first:
            if placed >= top_k:
                break
            head |= standings.component_bits[component]
            placed += len(standings.component_members[component])
        return head

    def _close_if_done(self, batch: Batch) -> None:
        if batch.outstanding:
            return
        if len(batch.asked) < batch.wanted_judges and self._next_judge(batch) is not None:
            return
        del self._open_batches[batch.batch_id]
        self._busy = 0
        for still_open in self._open_batches.values():
            self._busy |= still_open.bits


def _progress_of(standings: Standings, top_k: int) -> _Progress:
    everyone = (1 << standings.size) - 1
    if top_k:
        contenders = 0
        for candidate, above in enumerate(standings.above_count):
            if above < top_k:
                contenders |= 1 << candidate
    else:
        contenders = everyone
    settled = everyone & ~contenders
    for members, unknown in zip(standings.component_bits, standings.unknown_bits, strict=True):
        if not unknown:
            settled |= members
    needed = tuple(
        unknown & contenders if members & contenders else 0
        for members, unknown in zip(standings.component_bits, standings.unknown_bits, strict=True)
    )
    return _Progress(standings, contenders, needed, settled)


def _validate(candidate_ids: Sequence[str], config: TournamentConfig) -> None:
    if len(set(candidate_ids)) != len(candidate_ids):
        raise ValueError("candidate ids must be unique")
    if config.batch_size < 2:
        raise ValueError("batch_size must be at least 2")
    if config.top_k < 0:
        raise ValueError("top_k must be 0 (full order) or positive")
    if config.max_in_flight < 1:
        raise ValueError("max_in_flight must be at least 1")
    if not config.judge_weights:
        raise ValueError("at least one judge weight is required")
    if any(not math.isfinite(w) or w < 0 for w in config.judge_weights):
        raise ValueError("judge weights must be finite and non-negative")
    if config.ensemble not in ("all", "adaptive"):
        raise ValueError(f"unknown ensemble mode {config.ensemble!r}")
    if config.quorum < 1:
        raise ValueError("quorum must be at least 1")
