"""scripts/myst.py (and so scripts/editions.py) works beside future-typing, whose codec
search function answers every codec name, shadowing latexcodec's "ulatex" (pybtex)."""

import codecs
import sys
import types

from myst import repair_codecs


def test_a_catch_all_codec_hook_no_longer_breaks_bibtex(monkeypatch):
    from pybtex.richtext import Text
    utf_8 = codecs.lookup("utf-8")

    def decode(data, errors="strict"):      # future-typing's decoder wants bytes
        return utf_8.decode(bytes(data), errors)

    def search_function(_name):             # future-typing's: every name is its codec
        return codecs.CodecInfo(utf_8.encode, decode, name="future_typing")

    codec = types.ModuleType("future_typing.codec")
    codec.search_function = search_function
    monkeypatch.setitem(sys.modules, "future_typing.codec", codec)
    codecs.register(search_function)
    codecs.register(search_function)        # the .pth may run twice
    try:
        assert codecs.lookup("ulatex+utf8").name == "future_typing"     # the breakage
        assert repair_codecs()
        assert Text.from_latex(r"\"o").render_as("text") == "ö"
        assert codecs.lookup("future_typing").name == "future_typing"
    finally:
        for _ in range(3):
            codecs.unregister(search_function)
