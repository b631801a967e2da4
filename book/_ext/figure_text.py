"""Sphinx extension: every figure's image gets alternative text from its caption.

MyST-NB's figures (``mystnb: figure: caption``) carry no ``alt``, and Sphinx's HTML writer
then writes the image's path (``../_images/<hash>.png``), which is what a screen reader
read out (issue 19). The alt text is the caption's first sentence, without the figure
number; a figure that has no caption keeps what it has.
"""

from __future__ import annotations

import re

from docutils import nodes

PATHLIKE = re.compile(r"(^|/)[\w.-]+\.(png|jpe?g|svg|gif)$")


def alt_text(caption: str, limit: int = 200) -> str:
    """The caption's first sentence (at most ``limit`` characters), plain text."""
    text = " ".join(caption.split())
    first = re.split(r"(?<=[a-z0-9)\]])\.\s+(?=[A-Z(])", text, maxsplit=1)[0].rstrip(".")
    if len(first) > limit:
        first = first[:limit].rsplit(" ", 1)[0] + "…"
    return first


def _alt_from_captions(app, doctree, docname) -> None:
    for figure in doctree.findall(nodes.figure):
        caption = next(iter(figure.findall(nodes.caption)), None)
        if caption is None:
            continue
        alt = alt_text(caption.astext())
        for image in figure.findall(nodes.image):
            if not image.get("alt") or PATHLIKE.search(image["alt"]):
                image["alt"] = alt


def setup(app):
    app.connect("doctree-resolved", _alt_from_captions)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "0.1"}
