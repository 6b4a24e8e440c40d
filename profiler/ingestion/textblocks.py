"""Turning prompt text into token counts and chained block hashes, keeping no text.

With a tokenizer (a local Hugging Face folder holding `tokenizer.json`) counts are exact and
blocks are `BLOCK_TOKENS` token ids. Without one, tokens are estimated as ceil(chars / 4) and
blocks are `BLOCK_TOKENS * 4` characters, so `block_size` still reads as (estimated) tokens.
`token_ids` gives the sequence the n-gram acceptance estimate (`profiler.analysis.ngram_acceptance`)
matches on: the tokenizer's ids, or without one words and punctuation marks (`WORD_RE`).
Block i's hash is xxh3-64 of its bytes seeded with block i-1's hash: equal hashes mean equal
prefixes up to that block. The last, partial block is hashed too (as Mooncake's `hash_ids` are).
"""

from __future__ import annotations

import math
import re
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import UsageError

BLOCK_TOKENS = 16
CHARS_PER_TOKEN = 4
# Without a tokenizer: a word (letters, digits, _) or one punctuation mark per token. BPE
# tokenizers mostly cut text at these boundaries too, and split some words into several
# tokens: word n-grams stand in for token n-grams (coarser, so the estimate is approximate).
WORD_RE = re.compile(r"\w+|[^\w\s]")
ROLE_NAMES = {"human": "user", "gpt": "assistant", "chatgpt": "assistant", "bing": "assistant"}


def estimate_tokens(text: str) -> int:
    """The chars/4 rule of thumb for English text with BPE tokenizers."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def message_text(content: Any) -> str:
    """Text of an OpenAI message `content`: a string, or the text parts of a list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") if isinstance(p, dict) else str(p) for p in content]
        return "".join(p for p in parts if isinstance(p, str))
    return str(content)


def render_message(role: str, content: str) -> str:
    """How one chat message joins a prompt: `role: text` and a newline."""
    return f"{ROLE_NAMES.get(role, role)}: {content}\n"


def _chain(blocks: list[bytes], seed: int = 0) -> list[int]:
    import xxhash

    out = []
    for block in blocks:
        seed = xxhash.xxh3_64_intdigest(block, seed=seed)
        out.append(seed)
    return out


@dataclass
class TextMeasurer:
    """Counts tokens and hashes blocks of prompts; reuses work along a growing conversation."""

    tokenizer_dir: str | None = None
    _tokenizer: Any = field(default=None, init=False, repr=False)
    _last_text: str = field(default="", init=False, repr=False)
    _last_hashes: list[int] = field(default_factory=list, init=False, repr=False)

    @property
    def estimated(self) -> bool:
        return self.tokenizer_dir is None

    @property
    def block_size(self) -> int:
        return BLOCK_TOKENS

    def load(self) -> None:
        """Load the tokenizer, if one is configured (explicit: no work at construction)."""
        if self.tokenizer_dir is None or self._tokenizer is not None:
            return
        path = Path(self.tokenizer_dir) / "tokenizer.json"
        if not path.is_file():
            raise UsageError(f"--tokenizer {self.tokenizer_dir}: no tokenizer.json in that folder")
        from tokenizers import Tokenizer

        try:
            self._tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # the tokenizers library raises a bare Exception
            raise UsageError(f"--tokenizer {self.tokenizer_dir}: cannot load ({exc})") from None

    def count(self, text: str) -> int:
        """Tokens in `text` (exact with a tokenizer, else estimated)."""
        if self._tokenizer is None:
            return estimate_tokens(text)
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def token_ids(self, text: str) -> list[Hashable]:
        """`text` as a token sequence: tokenizer ids, else words and punctuation (WORD_RE)."""
        if self._tokenizer is None:
            return list(WORD_RE.findall(text))
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def measure(self, text: str) -> tuple[int, list[int]]:
        """Return (tokens, chained block hashes) of a prompt."""
        if self._tokenizer is not None:
            return self._measure_tokens(text)
        return estimate_tokens(text), self._char_hashes(text)

    def _measure_tokens(self, text: str) -> tuple[int, list[int]]:
        import numpy as np

        ids = np.asarray(self._tokenizer.encode(text, add_special_tokens=False).ids, np.uint32)
        blocks = [ids[i : i + BLOCK_TOKENS].tobytes() for i in range(0, len(ids), BLOCK_TOKENS)]
        return len(ids), _chain(blocks)

    def _char_hashes(self, text: str) -> list[int]:
        width = BLOCK_TOKENS * CHARS_PER_TOKEN
        # A conversation's next prompt extends the previous one: keep its full blocks.
        full = len(self._last_text) // width
        if full and text.startswith(self._last_text):
            start, hashes = full * width, self._last_hashes[:full]
        else:
            start, hashes = 0, []
        seed = hashes[-1] if hashes else 0
        blocks = [text[i : i + width].encode("utf-8", "surrogatepass") for i in
                  range(start, len(text), width)]
        hashes = hashes + _chain(blocks, seed)
        self._last_text, self._last_hashes = text, hashes
        return hashes
