"""Sphinx extension: every figure's image gets alternative text from its caption, and
code cells do not show their ``glue(...)`` bookkeeping.

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
    app.connect("doctree-read", _hide_glue)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "0.1"}


# ------------------------------------------------------------------ bookkeeping code
def without_glue(source: str) -> str:
    """``source`` without its top-level ``glue(...)`` calls (and loops of nothing else):
    they hand numbers to the text and teach nothing, so the page does not show them."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source

    def is_glue(node) -> bool:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            return getattr(node.value.func, "id", None) == "glue"
        if isinstance(node, ast.For):
            return all(is_glue(n) for n in node.body) and not node.orelse
        return False

    lines = source.splitlines()
    drop = set()
    for node in tree.body:
        if is_glue(node):
            drop.update(range(node.lineno - 1, node.end_lineno))
    kept = [line for i, line in enumerate(lines) if i not in drop]
    return "\n".join(kept).strip("\n")


def _hide_glue(app, doctree) -> None:
    for cell in list(doctree.findall(nodes.container)):
        if "cell_input" not in cell.get("classes", []):
            continue
        block = next(iter(cell.findall(nodes.literal_block)), None)
        if block is None or "glue(" not in block.astext():
            continue
        kept = without_glue(block.astext())
        if not kept.strip():
            cell.parent.remove(cell)
        elif kept != block.astext():
            block.children = [nodes.Text(kept)]
            block.rawsource = kept
