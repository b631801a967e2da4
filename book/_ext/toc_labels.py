"""Sphinx extension: a name for each expander of the sidebar's table of contents.

A chapter with pages under it (a lesson and its replication page) gets an expander in the
sidebar: pydata-sphinx-theme writes ``<details><summary>`` holding only a chevron icon,
so a screen reader announces an unnamed control, and axe-core reports ``summary-name``
on every page (stop 31). This wraps the theme's ``generate_toctree_html`` and names each
such ``<summary>`` after the chapter link before it: "Pages under 2. Unselectable keys…".
"""

from __future__ import annotations

import html
import re

# the chapter's link, then the expander the theme writes right after it
_EXPANDER = re.compile(r'(<a class="[^"]*reference internal[^"]*" href="[^"]*">'
                       r'((?:(?!</a>).)*)</a><details(?: open="open")?>)<summary>', re.S)


def name_expanders(toc_html: str) -> str:
    """``toc_html`` with an aria-label on every ``<summary>`` that follows a link."""
    def label(m: re.Match) -> str:
        title = html.unescape(re.sub(r"<[^>]+>", "", m.group(2))).strip()
        return f'{m.group(1)}<summary aria-label="{html.escape("Pages under " + title)}">'
    return _EXPANDER.sub(label, toc_html)


def _wrap(app, pagename, templatename, context, doctree) -> None:
    generate = context.get("generate_toctree_html")
    if generate is None or getattr(generate, "_named", False):
        return

    def named(*args, **kwargs):
        return name_expanders(str(generate(*args, **kwargs)))

    named._named = True
    context["generate_toctree_html"] = named


def setup(app):
    # after the theme adds its toctree functions (priority 500)
    app.connect("html-page-context", _wrap, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "0.1"}
