"""Sphinx extension: narrow screens get each figure's phone layout.

On a 390 px phone the column is 358 px, and a figure drawn for the 688 px desktop column
showed its text at 5 to 7 px (issue 19). The site's build draws every figure a second
time for a phone (``lncourse.plotting.phone``: panels stacked, 358 px wide, text of at
least 10 px) and stores that PNG inside the figure's PNG, in a text chunk. This extension
takes it out when a page is read: the figure's PNG is written again without it (so the
desktop image weighs what it did), the phone's PNG beside it, and the HTML shows both
through ``<picture>``: the phone's below ``BREAKPOINT_PX``, the desktop's above. Other
builders (the PDF) show the desktop figure only. A figure without the chunk (a
notebook executed outside ``scripts/build_site.sh``) is left as it was.
"""

from __future__ import annotations

import base64
import posixpath
import struct
import urllib.parse
import zlib
from html import escape
from pathlib import Path

from docutils import nodes

PHONE_PNG_KEY = b"lncourse-phone-png"   # = lncourse.plotting.phone.PHONE_PNG_KEY
BREAKPOINT_PX = 700    # below: the column is under 650 px, and the phone's layout is shown
_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class phone_picture(nodes.General, nodes.Element):
    """A figure's image with its phone layout: children [phone image, desktop image]."""


def split_png(data: bytes) -> tuple[bytes, bytes | None]:
    """``data`` without its phone chunk, and the phone's PNG (None if it has none)."""
    if not data.startswith(_SIGNATURE):
        return data, None
    out, phone, i = [_SIGNATURE], None, len(_SIGNATURE)
    while i + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[i:i + 8])
        chunk = data[i:i + 12 + length]
        body = data[i + 8:i + 8 + length]
        i += 12 + length
        if kind in (b"tEXt", b"iTXt", b"zTXt") and body.split(b"\0", 1)[0] == PHONE_PNG_KEY:
            phone = base64.b64decode(_text(kind, body))
            continue
        out.append(chunk)
    return b"".join(out), phone


def _text(kind: bytes, body: bytes) -> bytes:
    key, rest = body.split(b"\0", 1)
    if kind == b"tEXt":
        return rest
    if kind == b"zTXt":
        return zlib.decompress(rest[1:])
    flag, method, rest = rest[0], rest[1], rest[2:]       # iTXt
    _lang, _translated, text = rest.split(b"\0", 2)
    return zlib.decompress(text) if flag else text


def png_size(data: bytes) -> tuple[int, int]:
    return struct.unpack(">II", data[16:24])


def _split_figures(app, doctree) -> None:
    docname = app.env.docname
    for image in list(doctree.findall(nodes.image)):
        uri = image.get("uri", "")
        if not uri.endswith(".png") or "://" in uri:
            continue
        _, path = app.env.relfn2path(uri, docname)
        path = Path(path)
        if not path.exists() or path.stem.endswith(("-page", "-phone")):
            continue
        page, phone = split_png(path.read_bytes())
        if phone is None:
            continue
        page_path, phone_path = (path.with_name(f"{path.stem}-{k}.png") for k in ("page", "phone"))
        for target, data in ((page_path, page), (phone_path, phone)):
            if not target.exists() or target.read_bytes() != data:
                target.write_bytes(data)
        image["uri"] = posixpath.join(posixpath.dirname(uri), page_path.name)
        width, height = png_size(phone)
        small = nodes.image(uri=posixpath.join(posixpath.dirname(uri), phone_path.name),
                            alt="", classes=["lncourse-phone"])
        small["phone_size"] = (width // 2, height // 2)     # drawn at 2x
        picture = phone_picture()
        image.replace_self(picture)
        picture += [small, image]


def _src(translator, uri: str) -> str:
    images = translator.builder.images
    return posixpath.join(translator.builder.imgpath, urllib.parse.quote(images[uri])) \
        if uri in images else uri


def visit_picture_html(self, node) -> None:
    small = node[0]
    image = next(n for n in node[1].findall(nodes.image))
    width, height = small["phone_size"]
    attrs = ""
    if image.get("width") and image.get("height"):
        attrs = f' width="{int(float(image["width"]))}" height="{int(float(image["height"]))}"'
    self.body.append(
        f'<picture><source media="(max-width: {BREAKPOINT_PX - 0.02}px)" '
        f'srcset="{_src(self, small["uri"])} 2x" width="{width}" height="{height}">'
        f'<img src="{_src(self, image["uri"])}" alt="{escape(image.get("alt", ""))}"{attrs} '
        f'class="lncourse-figure"></picture>\n')
    raise nodes.SkipNode


def visit_picture_other(self, node) -> None:
    """The desktop figure only (LaTeX and the rest)."""
    for child in node.children[1:]:
        child.walkabout(self)
    raise nodes.SkipNode


def setup(app):
    other = (visit_picture_other, None)
    app.add_node(phone_picture, html=(visit_picture_html, None), latex=other, text=other,
                 man=other, texinfo=other)
    # before Sphinx's image collector (priority 500) registers the images to copy
    app.connect("doctree-read", _split_figures, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "0.1"}
