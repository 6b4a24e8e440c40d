"""Prompt-lookup (ngram) speculative acceptance, measured on a trace's own conversation text.

Owns the replay of vLLM's n-gram proposer over every output whose text the trace holds (the
reply after a ShareGPT human turn, the response of an OpenAI-style log entry) and the counters
it leaves: steps, drafted and accepted tokens. No text is kept: a conversation's tokens and
n-gram index live while its object is read, then only the counters remain.

The replay, per output token position p (context = everything before it: earlier messages,
then the output's first p tokens):
 1. proposal: the longest suffix of the context of length n in [NGRAM_MIN, NGRAM_MAX] that also
    occurs earlier in the context, at its earliest occurrence; the draft is the (up to) k
    tokens that followed that occurrence. No such suffix: no draft.
 2. verification (greedy, as the target would): the draft's longest prefix equal to the real
    continuation is accepted, plus one token the target produces itself (the bonus), capped
    at the tokens left in the output. The step ends; the emitted tokens join the context.
This is vLLM's `NgramProposer` (longest n within [prompt_lookup_min, prompt_lookup_max],
k = num_speculative_tokens) under greedy verification.

Defaults: NGRAM_MAX = 4 is what `engines.vllm.spellings` writes (`prompt_lookup_max`); vLLM's
SpeculativeConfig sets `prompt_lookup_min` to `prompt_lookup_max` when only the latter is
given, hence NGRAM_MIN = 4. NGRAM_K = 3 is the search's speculative config
(`recommender.decision.variants.SPECULATIVE`). A test checks both stay equal to those.

Which rate: `recommender.model.speculative` models a step as emitting E = (1 − a^(k+1)) / (1 − a)
tokens. The replay measures E directly (output tokens / steps, every step counted, those
without a draft too), and `acceptance` is the a that solves E(a, k) = measured E. That makes
the simulator reproduce the measured step count at this k. Accepted / drafted tokens (vLLM's
"draft acceptance rate") is kept as a counter but not used: it ignores the steps that found
no match (most steps on open chat), so it overstates the gain there.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from profiler.schema import NgramAcceptance

NGRAM_MIN = 4
NGRAM_MAX = 4
NGRAM_K = 3
_BISECT_STEPS = 60  # halvings of [0, 1]: far below float resolution of a


class Message(NamedTuple):
    """One message of a conversation: `header` and `text` join the context; `output` marks a
    model reply whose tokens are replayed (its header still counts as context)."""

    header: str
    text: str
    output: bool


def earliest_followers(tokens: Sequence[Hashable], n_min: int, n_max: int
                       ) -> list[tuple[int, list[int]]]:
    """(n, for each i the index of the token after the earliest occurrence of the n-gram
    tokens[i:i + n]) for each n from n_max down to n_min that the tokens are longer than (the
    last n-gram, with nothing after it, left out): longest first, the order the proposer tries.

    Built once over a whole conversation: the context at position p is tokens[:p], and the
    earliest occurrence of its suffix tokens[p − n:p] lies before p exactly when the entry of
    i = p − n is below p, so one pass answers every position. The pass runs in C (a dict's
    setdefault mapped over the n-grams gives each one's earliest follower); the replay then
    reads a list instead of hashing a tuple per step (a per-token Python loop cost 10× the
    rest of ingest).
    """
    out = []
    size = len(tokens)
    for n in range(n_max, n_min - 1, -1):
        if size <= n:
            continue
        follower: dict[tuple[Hashable, ...], int] = {}
        grams = zip(*(tokens[j:size - n + j] for j in range(n)), strict=True)
        out.append((n, list(map(follower.setdefault, grams, range(n, size)))))
    return out


@dataclass
class NgramEstimator:
    """Replays prompt lookup over the outputs of the conversations it is shown; counters only.

    `tokenize` turns text into a token sequence (`TextMeasurer.token_ids`).
    """

    tokenize: Callable[[str], Sequence[Hashable]]
    tokenization: Literal["tokenizer", "words"]
    k: int = NGRAM_K
    n_min: int = NGRAM_MIN
    n_max: int = NGRAM_MAX
    outputs: int = 0
    tokens: int = 0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0

    def observe(self, messages: Iterable[Message]) -> None:
        """Replay every output message of one conversation, in order."""
        tokens: list[Hashable] = []
        spans: list[tuple[int, int]] = []
        for message in messages:
            if message.header:
                tokens.extend(self.tokenize(message.header))
            body = self.tokenize(message.text)
            if message.output and body:
                spans.append((len(tokens), len(tokens) + len(body)))
            tokens.extend(body)
        if not spans:
            return
        longest_first = earliest_followers(tokens, self.n_min, self.n_max)
        for start, end in spans:
            self._replay(tokens, longest_first, start, end)

    def _replay(self, tokens: Sequence[Hashable], longest_first: list[tuple[int, list[int]]],
                start: int, end: int) -> None:
        """Steps over tokens[start:end] (an output) with the context tokens[:p] at each p;
        `longest_first`: `earliest_followers` of the conversation."""
        p, k = start, self.k
        steps = drafted = accepted = 0
        while p < end:
            first = last = 0
            for n, after in longest_first:
                if n <= p:
                    f = after[p - n]
                    if f < p:  # occurred before the suffix itself: draft what followed
                        first, last = f, (f + k if f + k < p else p)
                        break
            rest = end - p
            limit = last - first if last - first < rest else rest
            match = 0
            while match < limit and tokens[first + match] == tokens[p + match]:
                match += 1
            steps += 1
            drafted += last - first
            accepted += match
            p += match + 1 if match < rest else rest
        self.steps += steps
        self.drafted += drafted
        self.accepted += accepted
        self.outputs += 1
        self.tokens += end - start

    def result(self) -> NgramAcceptance | None:
        """The measured rate, or None when no output text was seen."""
        if not self.steps:
            return None
        per_step = self.tokens / self.steps
        return NgramAcceptance(
            acceptance=solve_acceptance(per_step, self.k), tokens_per_step=per_step, k=self.k,
            ngram_min=self.n_min, ngram_max=self.n_max, outputs=self.outputs,
            tokens=self.tokens, steps=self.steps, drafted=self.drafted, accepted=self.accepted,
            tokenization=self.tokenization,
        )


def solve_acceptance(tokens_per_step: float, k: int) -> float:
    """The a in [0, 1] with (1 − a^(k+1)) / (1 − a) = tokens_per_step (clamped to [1, k+1]).

    E(a) rises monotonically from 1 (a = 0) to k + 1 (a = 1), so bisection finds it.
    """
    if tokens_per_step <= 1.0:
        return 0.0
    if tokens_per_step >= k + 1.0:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(_BISECT_STEPS):
        mid = (lo + hi) / 2
        if sum(mid ** i for i in range(k + 1)) < tokens_per_step:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
