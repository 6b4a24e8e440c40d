"""Prompts of exact token lengths, with the trace's shared prefixes reproduced.

Token-id prompts (`list[int]`, completions API) are exact by construction: ids are drawn from a
seeded pool inside a safe id range. A request's own tokens start with a marker that encodes its
index, so no two requests share a first block by accident. Trace prefixes: block `j` of a
request with chained hashes `h_0..h_k` is a pure function of `h_j`, so identical hash chains give
identical token blocks and the engine's prefix cache sees the trace's reuse (any engine block
size that divides the trace's works, and a smaller one sees the same runs).

Text prompts (chat API, or servers that take no ids) are words calibrated against the server's
`/tokenize` until the count is exact (`TextPrompts`); they do not reproduce trace prefixes
(exact shared token blocks need token ids).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.errors import RunnerError

POOL_TOKENS = 1 << 16
DEFAULT_LOW_ID = 100  # ids below this are often special or control tokens
# A sample with many scripts and symbols, so its largest token id is near the top of the vocab.
VOCAB_SAMPLE = (
    "The quick brown fox jumps over the lazy dog. Zwölf Boxkämpfer jagen Viktor quer über den "
    "großen Sylter Deich. Съешь же ещё этих мягких французских булок. 東京都の天気は晴れです。"
    "中文字符测试，包括标点。 한국어 문장입니다. ελληνικά κείμενα. עברית. العربية. हिन्दी पाठ। "
    "emoji 🙂🚀🎉 math ∑∫√∞≈≠ code {x: [1, 2, 3]} <tag/> 0123456789 https://example.org/?q=1"
)
MIN_ID_SPAN = 1000


def _mix(x: int) -> int:
    """SplitMix64 finaliser: a well-spread 64-bit function of `x` (pure, seed-free)."""
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


class TokenPrompts:
    """Token-id prompts in `[low_id, high_id)`, deterministic for a seed."""

    def __init__(self, high_id: int, *, low_id: int = DEFAULT_LOW_ID, seed: int = 0) -> None:
        if high_id - low_id < MIN_ID_SPAN:
            raise RunnerError(f"token id range [{low_id}, {high_id}) is too small for prompts")
        self.low_id, self.high_id, self.seed = low_id, high_id, seed
        self._span = high_id - low_id
        rng = np.random.default_rng(seed)
        self._pool: list[int] = rng.integers(low_id, high_id, POOL_TOKENS).tolist()

    def _marker(self, key: int, width: int) -> list[int]:
        """`width` ids spelling `key` in base span: distinct keys give distinct markers."""
        out = []
        for _ in range(width):
            key, digit = divmod(key, self._span)
            out.append(self.low_id + digit)
        return out

    def _run(self, key: int, n: int) -> list[int]:
        """`n` pool ids starting at an offset chosen by `key` (wrapping round the pool)."""
        pos = _mix(key ^ self.seed) % POOL_TOKENS
        out: list[int] = []
        while len(out) < n:
            out += self._pool[pos : pos + n - len(out)]
            pos = 0
        return out

    def block(self, block_hash: int, size: int) -> list[int]:
        """The tokens of the trace block with hash `block_hash` (a function of it alone)."""
        key = _mix(block_hash)
        head = self._marker(key, min(3, size))
        return head + self._run(key, size - len(head))

    def unique(self, index: int, n: int) -> list[int]:
        """`n` tokens that no other index shares a prefix with (starts with the index marker)."""
        key = _mix(index + (1 << 62))
        head = self._marker(index * 7919 + self.seed, min(3, n))
        return head + self._run(key, n - len(head))

    def prompt(self, index: int, n_tokens: int, block_hashes: list[int] | None = None,
               block_size: int | None = None) -> list[int]:
        """Exactly `n_tokens` ids: the trace blocks first (cut to length), then own tokens."""
        if not block_hashes or not block_size:
            return self.unique(index, n_tokens)
        out: list[int] = []
        for h in block_hashes:
            if len(out) >= n_tokens:
                break
            out += self.block(h, block_size)
        if len(out) >= n_tokens:
            return out[:n_tokens]
        return out + self.unique(index, n_tokens - len(out))


async def _post_json(session: Any, url: str, body: dict[str, Any]) -> dict[str, Any]:
    async with session.post(url, json=body, allow_redirects=False) as resp:
        if resp.status != 200:
            text = (await resp.text())[:300]
            raise RunnerError(f"POST {url} answered HTTP {resp.status}: {text}")
        try:
            got = await resp.json(content_type=None)
        except ValueError:
            got = None
        if not isinstance(got, dict):
            raise RunnerError(f"POST {url} did not answer a JSON object")
        return got


def server_root(url: str) -> str:
    """`http://h:p` from a base URL, a `/v1` URL or a full endpoint URL."""
    url = url.rstrip("/")
    for tail in ("/chat/completions", "/completions"):
        if url.endswith(tail):
            url = url[: -len(tail)]
    return url[:-3] if url.endswith("/v1") else url


async def served_model(session: Any, url: str) -> str:
    """The first model id in the server's `/v1/models`."""
    target = server_root(url) + "/v1/models"
    async with session.get(target, allow_redirects=False) as resp:  # never another host
        if resp.status != 200:
            raise RunnerError(f"GET {target} answered HTTP {resp.status}")
        try:
            data = (await resp.json(content_type=None)).get("data") or []
            first = data[0]["id"] if data else None
        except (ValueError, AttributeError, LookupError, TypeError):
            raise RunnerError(f"GET {target} did not answer an OpenAI model list; give the "
                              "model name (--model)") from None
    if first is None:
        raise RunnerError(f"{target} lists no model")
    return str(first)


async def tokenize(session: Any, url: str, model: str, text: str, *,
                   chat: bool = False) -> list[int]:
    """Token ids of `text` (as a user message when `chat`) from the server's `/tokenize`."""
    body: dict[str, Any] = {"model": model}
    if chat:
        body.update(messages=[{"role": "user", "content": text}], add_generation_prompt=True)
    else:
        body.update(prompt=text, add_special_tokens=False)
    target = server_root(url) + "/tokenize"
    got = await _post_json(session, target, body)
    tokens = got.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        raise RunnerError(f"POST {target} answered no token list")
    return tokens


async def id_range(session: Any, url: str, model: str) -> int:
    """An exclusive upper bound of safe ids: one past the largest id the server's tokenizer
    gives a many-script sample (every id up to it exists in the vocabulary)."""
    try:
        ids = await tokenize(session, url, model, VOCAB_SAMPLE)
        if not ids:
            raise RunnerError("/tokenize gave no tokens")
    except RunnerError as exc:
        raise RunnerError(f"cannot learn the token id range from the server ({exc}); "
                          "give the vocabulary size (vocab_size)") from None
    return max(ids) + 1


_WORD_TEXT = (
    "time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend father "
    "power hour game line end member law car city community name president team minute idea"
)
WORDS = tuple(_WORD_TEXT.split())


class TextPrompts:
    """Text prompts whose server-side token count is exact, via `/tokenize` calibration.

    Text is seeded random words after an index marker; the count is corrected word by word
    (words are one or two tokens after a space), then finally by trailing single characters.
    """

    def __init__(self, session: Any, url: str, model: str, *, chat: bool, seed: int = 0) -> None:
        self.session, self.url, self.model, self.chat, self.seed = session, url, model, chat, seed

    async def _count(self, text: str) -> int:
        return len(await tokenize(self.session, self.url, self.model, text, chat=self.chat))

    async def prompt(self, index: int, n_tokens: int) -> str:
        """A text of exactly `n_tokens` tokens as the server counts them (raises if impossible)."""
        rng = np.random.default_rng([self.seed, index])
        words = [f"r{index}:"] + [WORDS[k] for k in rng.integers(0, len(WORDS), n_tokens)]
        count = await self._count(" ".join(words))
        for _ in range(12):  # coarse: drop or add about the difference in words
            if count == n_tokens or len(words) <= 1:
                break
            if count > n_tokens:
                del words[max(1, len(words) - (count - n_tokens)):]
            else:
                words += [WORDS[k] for k in rng.integers(0, len(WORDS), n_tokens - count)]
            count = await self._count(" ".join(words))
        text = " ".join(words)
        for pad in ("x", " x", " 1", ".", " a"):  # fine: one token more at a time
            while count < n_tokens:
                trial = text + pad
                got = await self._count(trial)
                if got > n_tokens or got <= count:
                    break
                text, count = trial, got
        if count != n_tokens:
            raise RunnerError(f"cannot build a text prompt of exactly {n_tokens} tokens "
                              f"(got {count}); use token-id prompts (api='completions')")
        return text
