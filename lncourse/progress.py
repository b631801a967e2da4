"""Progress bars that work in a terminal, in Jupyter, in Colab and in the site build."""

from __future__ import annotations

from collections.abc import Iterable

from tqdm.std import tqdm


def progress(iterable: Iterable | None = None, total: int | None = None,
             desc: str | None = None, disable: bool = False, **kwargs) -> tqdm:
    """A plain-text tqdm bar on stderr.

    Plain text rather than a widget: it renders everywhere, including a notebook executed
    without a front end (the static site drops stderr, so no bar appears on the web pages).
    """
    return tqdm(iterable, total=total, desc=desc, disable=disable, mininterval=0.5,
                dynamic_ncols=True, **kwargs)
