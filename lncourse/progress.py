"""Progress bars where a person watches: a terminal, Jupyter or Colab, not a notebook
run by papermill, the site build or the autograder.

tqdm is imported when a bar is made, not with this module: the modules that run on a lent
GPU (:mod:`lncourse.evidence.nope.stream_device`) import this one and need only torch and
numpy there."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tqdm.std import tqdm


def someone_watching() -> bool:
    """True in a terminal and in a notebook open in Jupyter or Colab.

    ``LNCOURSE_PROGRESS=0`` or ``1`` decides outright. In a notebook kernel, a front end
    a person uses allows input (``input()`` works); papermill, nbclient and the site
    build run notebooks with input disallowed, and their logs should not fill with bars.
    """
    setting = os.environ.get("LNCOURSE_PROGRESS")
    if setting in ("0", "1"):
        return setting == "1"
    if "ipykernel" in sys.modules:
        from IPython import get_ipython

        shell = get_ipython()
        kernel = getattr(shell, "kernel", None)
        if kernel is not None:
            return bool(getattr(kernel, "_allow_stdin", False))
    return sys.stderr.isatty()


def progress(iterable: Iterable | None = None, total: int | None = None,
             desc: str | None = None, disable: bool = False, **kwargs) -> tqdm:
    """A plain-text tqdm bar on stderr, shown only where someone watches.

    Plain text rather than a widget: it renders everywhere, including Colab.
    """
    from tqdm.std import tqdm

    return tqdm(iterable, total=total, desc=desc, disable=disable or not someone_watching(),
                mininterval=0.5, dynamic_ncols=True, **kwargs)
