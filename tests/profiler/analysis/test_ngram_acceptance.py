"""Prompt-lookup acceptance: the replay against a brute-force one, and at ingest on real text."""

from __future__ import annotations

import gzip
import itertools
import json
import re

import numpy as np
import pytest

from profiler.analysis.ngram_acceptance import Message, NgramEstimator, solve_acceptance
from profiler.ingestion.ingest import ingest
from profiler.workspace import Workspace
from tests import reference as ref

SHAREGPT = ref.TRACES / "sharegpt_head1000.json.gz"
WORDS = re.compile(r"\w+|[^\w\s]")


def _brute_force(messages, k, n_min, n_max):
    """(outputs, tokens, steps, drafted, accepted): at every step scan the whole context for
    the earliest earlier occurrence of its longest suffix, draft what followed, accept the
    matching prefix plus one token."""
    ctx, outputs, tokens, steps, drafted, accepted = [], 0, 0, 0, 0, 0
    for header, body, is_output in messages:
        ctx += header
        if not is_output or not body:
            ctx += body
            continue
        p = 0
        while p < len(body):
            draft = []
            for n in range(n_max, n_min - 1, -1):
                hits = [i for i in range(len(ctx) - n) if ctx[i:i + n] == ctx[len(ctx) - n:]]
                if len(ctx) >= n and hits:
                    draft = ctx[hits[0] + n:hits[0] + n + k]
                    break
            good = 0
            while good < len(draft) and p + good < len(body) and draft[good] == body[p + good]:
                good += 1
            emit = min(good + 1, len(body) - p)
            ctx += body[p:p + emit]
            p += emit
            steps, drafted, accepted = steps + 1, drafted + len(draft), accepted + good
        outputs, tokens = outputs + 1, tokens + len(body)
    return outputs, tokens, steps, drafted, accepted


def _run(messages, k=3, n_min=4, n_max=4):
    """The estimator on pre-tokenized messages (tokens as space-separated strings)."""
    est = NgramEstimator(str.split, "words", k=k, n_min=n_min, n_max=n_max)
    est.observe(Message(" ".join(h), " ".join(b), o) for h, b, o in messages)
    return est


def _counters(est):
    return est.outputs, est.tokens, est.steps, est.drafted, est.accepted


def test_an_output_repeating_the_prompt_is_drafted_once_four_tokens_are_known():
    prompt = list("abcdefghijklmnop")  # 16 distinct tokens
    est = _run([([], prompt, False), ([], prompt, True)])
    # p = 0..3: the suffix (…, 'p', 'a', …) never occurred before: 4 one-token steps. From
    # p = 4 on, 'abcd', 'efgh', 'ijkl' are found at the start: 3 drafts of 3, all accepted,
    # each step 4 tokens. 16 tokens in 7 steps.
    assert _counters(est) == (1, 16, 7, 9, 9)
    assert est.result().tokens_per_step == pytest.approx(16 / 7)


def test_an_output_with_no_overlap_accepts_nothing():
    est = _run([([], list("abcdefgh"), False), ([], [f"w{i}" for i in range(50)], True)])
    assert _counters(est) == (1, 50, 50, 0, 0)
    assert est.result().acceptance == 0.0


def test_no_output_text_gives_no_estimate():
    est = _run([([], list("abcdefgh"), False)])
    assert est.result() is None


@pytest.mark.parametrize(("k", "n_min", "n_max"), [(3, 4, 4), (5, 2, 4), (1, 1, 3)])
def test_matches_brute_force_on_random_conversations(k, n_min, n_max):
    rng = np.random.default_rng(7)
    for _ in range(30):
        messages = []
        for turn in range(int(rng.integers(1, 5))):
            alphabet = int(rng.integers(2, 6))  # few symbols: many repeats and partial matches
            body = [f"t{x}" for x in rng.integers(0, alphabet, int(rng.integers(0, 60)))]
            messages.append((["user", ":"], body, False) if turn % 2 == 0 else
                            (["assistant", ":"], body, True))
        assert _counters(_run(messages, k, n_min, n_max)) == _brute_force(
            messages, k, n_min, n_max)


def test_matches_brute_force_on_short_real_conversations():
    with gzip.open(SHAREGPT, "rt", encoding="utf-8") as fh:
        convs = json.load(fh)
    names = {"human": "user", "gpt": "assistant"}
    short = [c for c in convs
             if sum(len(WORDS.findall(t["value"])) for t in c["conversations"]) < 400][:25]
    assert len(short) == 25
    for conv in short:
        turns, messages = conv["conversations"], []
        for i, t in enumerate(turns):
            human = t["from"] in ("human", "user")
            out = (not human) and i > 0 and turns[i - 1]["from"] in ("human", "user")
            header = [names.get(t["from"], t["from"]), ":"]
            messages.append((header, WORDS.findall(t["value"]), out))
        assert _counters(_run(messages)) == _brute_force(messages, 3, 4, 4)


@pytest.mark.parametrize(("per_step", "k"), [(1.0, 3), (1.19, 3), (2.5, 3), (3.3, 5), (4.0, 3)])
def test_solved_rate_reproduces_tokens_per_step(per_step, k):
    a = solve_acceptance(per_step, k)
    # Independently: the real root in [0, 1] of a^k + … + a + 1 − E.
    roots = np.roots([1.0] * (k + 1) - np.eye(k + 1)[k] * per_step)
    real = [r.real for r in roots if abs(r.imag) < 1e-9 and -1e-9 <= r.real <= 1 + 1e-9]
    assert a == pytest.approx(max(real), abs=1e-7)


def _sharegpt_outputs():
    """Word counts of the replies that follow a human turn (ShareGPT's request outputs)."""
    with gzip.open(SHAREGPT, "rt", encoding="utf-8") as fh:
        convs = json.load(fh)
    counts = []
    for conv in convs:
        turns = conv["conversations"]
        for prev, turn in itertools.pairwise(turns):
            if prev["from"] in ("human", "user") and turn["from"] not in ("human", "user"):
                counts.append(len(WORDS.findall(str(turn["value"] or ""))))
    return [c for c in counts if c]


def test_sharegpt_ingest_measures_open_chat_and_is_deterministic(tmp_path):
    a = ingest(str(SHAREGPT), Workspace.resolve(tmp_path / "a.duckdb")).format.ngram_acceptance
    b = ingest(str(SHAREGPT), Workspace.resolve(tmp_path / "b.duckdb")).format.ngram_acceptance
    assert a is not None and a == b
    counts = _sharegpt_outputs()
    assert (a.outputs, a.tokens) == (len(counts), sum(counts))
    assert (a.k, a.ngram_min, a.ngram_max, a.tokenization) == (3, 4, 4, "words")
    assert a.tokens_per_step == pytest.approx(a.tokens / a.steps)
    e = sum(a.acceptance ** i for i in range(a.k + 1))
    assert e == pytest.approx(a.tokens_per_step, rel=1e-9)
    # Open chat: most steps find no earlier 4-gram; far below the old 0.5 assumption.
    assert 0.05 < a.acceptance < 0.35
    assert a.steps > 0.7 * a.tokens


def test_a_table_trace_without_text_has_no_estimate(tmp_path):
    got = ingest(str(ref.TRACES / "BurstGPT_1.head400.csv"),
                 Workspace.resolve(tmp_path / "w.duckdb"))
    assert got.format.ngram_acceptance is None


def test_openai_log_replays_the_response_after_the_prompt(tmp_path):
    prompt = "please repeat after me : the quick brown fox jumps over the lazy dog"
    reply = "the quick brown fox jumps over the lazy dog"
    rows = [{"created": 1.0, "messages": [{"role": "user", "content": prompt}],
             "choices": [{"message": {"role": "assistant", "content": reply}}]},
            {"created": 2.0, "messages": [{"role": "user", "content": "hi"}],
             "usage": {"prompt_tokens": 1, "completion_tokens": 5}}]  # no text: not replayed
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    got = ingest(str(path), Workspace.resolve(tmp_path / "w.duckdb")).format.ngram_acceptance
    messages = [(["user", ":"], prompt.split(), False), (["assistant", ":"], reply.split(), True)]
    outputs, tokens, steps, drafted, accepted = _brute_force(messages, 3, 4, 4)
    assert got is not None
    assert (got.outputs, got.tokens, got.steps, got.drafted, got.accepted) == (
        outputs, tokens, steps, drafted, accepted)
    # 'the', 'quick', 'brown' follow 'assistant :', which the prompt lacks: 3 one-token steps.
    # Then ': the quick brown' is in the prompt: 'fox jumps over' accepted (+ 'the'), then
    # 'lazy dog' (the draft's third token, 'assistant', is past the end): 5 steps.
    assert (outputs, tokens, steps, drafted, accepted) == (1, 9, 5, 6, 5)
