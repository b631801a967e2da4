"""scripts/myst.py (and so scripts/editions.py) works beside future-typing, whose codec
search function answers every codec name, shadowing latexcodec's "ulatex" (pybtex).

The scenario runs in a fresh interpreter: the codec registry is process-wide and caches
lookups, so in a process where latexcodec is already registered (another test imported
pybtex) the catch-all would never be reached and the breakage could not be shown."""

import subprocess
import sys
import textwrap

from conftest import ROOT

SCENARIO = textwrap.dedent('''
    import codecs, sys, types
    sys.path.insert(0, sys.argv[1])
    utf_8 = codecs.lookup("utf-8")

    def decode(data, errors="strict"):      # future-typing's decoder wants bytes
        return utf_8.decode(bytes(data), errors)

    def search_function(_name):             # future-typing's: every name is its codec
        return codecs.CodecInfo(utf_8.encode, decode, name="future_typing")

    codec = types.ModuleType("future_typing.codec")
    codec.search_function = search_function
    sys.modules["future_typing.codec"] = codec
    codecs.register(search_function)
    codecs.register(search_function)        # the .pth may run twice
    from pybtex.richtext import Text
    from myst import repair_codecs
    assert codecs.lookup("ulatex+utf8").name == "future_typing"     # the breakage
    assert repair_codecs()
    assert Text.from_latex(r"\\"o").render_as("text") == "\\u00f6"
    assert codecs.lookup("future_typing").name == "future_typing"
    print("ok")
''')


def test_a_catch_all_codec_hook_no_longer_breaks_bibtex():
    out = subprocess.run([sys.executable, "-c", SCENARIO, str(ROOT / "scripts")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
