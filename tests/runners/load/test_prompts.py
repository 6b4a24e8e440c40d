"""Prompts: exact token lengths, the id range, trace prefixes reproduced block for block (on the
real Mooncake trace, expected shared runs computed independently), and text prompts calibrated
exactly against a real tokenizer served at `/tokenize`.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pandas as pd
import pytest

from core.errors import RunnerError
from runners.load import prompts
from runners.load.prompts import TextPrompts, TokenPrompts
from tests.runners.loadgen_server import LoadServer

pytestmark = pytest.mark.timeout(120)
MOONCAKE = Path(__file__).resolve().parents[2] / "data" / "traces" / (
    "mooncake_conversation_trace.jsonl.gz")


def test_exact_lengths_and_id_range():
    tp = TokenPrompts(5000, seed=1)
    for n in [1, 2, 3, 4, 17, 512, 70_000]:
        ids = tp.prompt(n, n)
        assert len(ids) == n
        assert min(ids) >= 100 and max(ids) < 5000


def test_deterministic_per_seed_and_index():
    assert TokenPrompts(5000, seed=1).prompt(3, 64) == TokenPrompts(5000, seed=1).prompt(3, 64)
    assert TokenPrompts(5000, seed=1).prompt(3, 64) != TokenPrompts(5000, seed=2).prompt(3, 64)


def test_requests_without_hashes_share_no_first_block():
    tp = TokenPrompts(32000)
    firsts = {tuple(tp.prompt(i, 64)[:16]) for i in range(5000)}
    assert len(firsts) == 5000


def test_shared_hash_runs_give_identical_blocks():
    tp = TokenPrompts(32000, seed=5)
    a = tp.prompt(0, 40, [11, 22, 33, 44], 10)
    b = tp.prompt(1, 40, [11, 22, 99, 44], 10)
    c = tp.prompt(2, 35, [11, 22, 33], 10)  # 30 from blocks, then 5 of its own
    assert a[:20] == b[:20] and a[20:30] != b[20:30]
    # equal hash value at the same position after a difference: same tokens (a pure function)
    assert a[30:40] == b[30:40]
    assert c[:30] == a[:30] and c[30:35] != a[30:35] and len(c) == 35
    assert tp.prompt(3, 25, [11, 22, 33], 10) == a[:25]  # cut inside the third block


def test_trace_prefix_reuse_is_reproduced_exactly():
    """On real Mooncake rows: two requests share their first k*512 tokens exactly when their
    hash lists share a leading run of k ids (k computed here with plain Python)."""
    df = pd.read_json(MOONCAKE, lines=True).head(300)
    tp = TokenPrompts(32000, seed=0)
    rows = list(df.itertuples())
    toks = [tp.prompt(i, min(r.input_length, 4096), list(r.hash_ids), 512)
            for i, r in enumerate(rows)]
    checked_shared = 0
    for (i, a), (j, b) in itertools.combinations(enumerate(rows), 2):
        if a.hash_ids[0] != b.hash_ids[0] and (i + j) % 7:
            continue  # all pairs with a common first block, and a sample of the others
        k = 0
        while k < min(len(a.hash_ids), len(b.hash_ids)) and a.hash_ids[k] == b.hash_ids[k]:
            k += 1
        n = min(len(toks[i]), len(toks[j]), k * 512)
        assert toks[i][:n] == toks[j][:n]
        if n < min(len(toks[i]), len(toks[j])):
            assert toks[i][n:n + 512] != toks[j][n:n + 512]  # the first differing block differs
        checked_shared += k > 0
    assert checked_shared > 100  # the conversation trace really has shared prefixes


def test_too_small_id_range_is_an_error():
    with pytest.raises(RunnerError, match="too small"):
        TokenPrompts(600)


def _tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|user|>", "<|assistant|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = [" ".join(prompts.WORDS[(i * 7) % len(prompts.WORDS):]) for i in range(200)]
    tok.train_from_iterator(corpus + ["r1: r22: r333: x 1 . a"] * 5, trainer)
    return tok


@pytest.fixture(scope="module")
def tok_server() -> Iterator[LoadServer]:
    srv = LoadServer(tokenizer=_tokenizer()).start()
    yield srv
    srv.stop()


@pytest.mark.parametrize("chat", [False, True])
def test_text_prompts_are_exact_against_the_tokenizer(tok_server, chat):
    tok = tok_server.tokenizer

    async def go():
        async with aiohttp.ClientSession() as s:
            tp = TextPrompts(s, tok_server.url, "test-model", chat=chat, seed=3)
            return {(i, n): await tp.prompt(i, n) for i in range(3) for n in (20, 64, 300)}

    got = asyncio.run(go())
    for (_i, n), text in got.items():
        full = f"<|user|>{text}<|assistant|>" if chat else text
        assert len(tok.encode(full, add_special_tokens=False).ids) == n
    assert len(set(got.values())) == len(got)


def test_server_helpers_learn_model_and_id_range(tok_server):
    async def go():
        async with aiohttp.ClientSession() as s:
            return (await prompts.served_model(s, tok_server.url + "/v1"),
                    await prompts.id_range(s, tok_server.url, "test-model"))

    model, high = asyncio.run(go())
    expected = max(_tokenizer().encode(prompts.VOCAB_SAMPLE).ids) + 1
    assert model == "test-model" and high == expected


def test_no_tokenize_endpoint_asks_for_the_vocab_size():
    srv = LoadServer().start()  # no tokenizer: /tokenize answers 404, as on servers without it
    try:
        async def go():
            async with aiohttp.ClientSession() as s:
                await prompts.id_range(s, srv.url, "test-model")

        with pytest.raises(RunnerError, match="vocab_size"):
            asyncio.run(go())
    finally:
        srv.stop()
