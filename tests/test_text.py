"""Tokenizers and splits of lncourse.text (chapters 2 and 4)."""

import re

import pytest
import torch

from lncourse.text import (BPETokenizer, CharTokenizer, char_streams, load_shakespeare,
                           sample_batch, split_text)


@pytest.fixture(scope="module")
def text():
    return load_shakespeare()[:200_000]


def test_char_tokenizer_round_trip_and_bad_ids(text):
    tok = CharTokenizer.from_text(text)
    assert tok.decode(tok.encode("To be, or not")) == "To be, or not"
    for bad in ([-1], [tok.vocab_size], torch.tensor([0, -3])):
        with pytest.raises(ValueError, match="outside the vocabulary"):
            tok.decode(bad)


def test_char_encode_is_the_lookup_of_each_character(text):
    """The vectorised encoding gives each character's place in the vocabulary, in any
    order of the vocabulary, characters beyond the Basic Multilingual Plane included."""
    tok = CharTokenizer.from_text(text)
    index = {c: i for i, c in enumerate(tok.chars)}
    ids = tok.encode(text)
    assert ids.dtype == torch.long and ids.tolist() == [index[c] for c in text]
    mixed = CharTokenizer("zq\U0001F600a\ud800")
    assert mixed.encode("a\U0001F600q\ud800z").tolist() == [3, 2, 1, 4, 0]
    assert mixed.encode("").tolist() == []


@pytest.mark.parametrize("chars, text, bad", [
    ("ab", "abc", "c"),                      # beyond the vocabulary's largest code point
    ("az", "a\u00e9z", "\u00e9"),             # between two of its code points
    ("az", "a\U0010FFFF", "\U0010FFFF"),     # the largest code point there is
    ("", "x", "x"),                           # an empty vocabulary
])
def test_char_encode_names_the_first_unknown_character(chars, text, bad):
    with pytest.raises(ValueError, match=re.escape(f"character {bad!r} is not in")):
        CharTokenizer(chars).encode(text)


def test_a_vocabulary_with_a_character_twice_is_refused():
    with pytest.raises(ValueError, match="'a' is in the vocabulary twice"):
        CharTokenizer("abca")


@pytest.mark.parametrize("text", [["a", "b"], b"ab", None])
def test_char_encode_takes_only_a_string(text):
    with pytest.raises(TypeError, match="text must be a str"):
        CharTokenizer("ab").encode(text)


def test_char_streams_split_a_prefix_with_the_whole_plays_vocabulary():
    """The streams of the first characters use the vocabulary of all the plays (the
    stored runs' vocabulary, whatever their length), split 90/10 as split_text does."""
    plays = load_shakespeare()
    tok, train_ids, test_ids = char_streams(100_000)
    assert tok == CharTokenizer.from_text(plays) and tok.vocab_size == len(set(plays))
    train, test = split_text(plays[:100_000])
    assert tok.decode(train_ids) == train and tok.decode(test_ids) == test
    assert char_streams(100_000)[1] is train_ids       # made once, shared


def test_bpe_is_deterministic_round_trips_and_compresses(text):
    a = BPETokenizer.train(text, 512)
    b = BPETokenizer.train(text, 512)
    assert a.fingerprint == b.fingerprint and a.vocab_size == 512
    assert BPETokenizer.train(text, 600).fingerprint != a.fingerprint
    sample = text[5000:8000]
    ids = a.encode(sample)
    assert ids.dtype == torch.long and a.decode(ids) == sample
    assert len(ids) < 0.6 * len(sample)                   # merges: fewer tokens than chars
    assert a.decode(a.encode("\u4e00 zebra")) == "\u4e00 zebra"   # byte-level: no unknowns
    with pytest.raises(ValueError, match="outside the vocabulary"):
        a.decode([512])


@pytest.mark.parametrize("call, match", [
    (lambda t: BPETokenizer.train(t, 256), "above 256"),
    (lambda t: BPETokenizer.train("", 512), "empty text"),
    (lambda t: split_text(t, 1.0), "test_fraction"),
    (lambda t: sample_batch(torch.arange(10), 0, 4, torch.Generator()), "positive"),
    (lambda t: sample_batch(torch.arange(10), 2, 10, torch.Generator()), "longer than"),
])
def test_bad_arguments(text, call, match):
    with pytest.raises(ValueError, match=match):
        call(text)


def test_split_text_is_a_partition(text):
    train, test = split_text(text, 0.25)
    assert train + test == text and len(test) == len(text) - int(len(text) * 0.75)
