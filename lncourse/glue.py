"""``glue`` for the generated notebooks: the chapters' ``myst_nb.glue`` without myst-nb.

On the site, a chapter glues a value (``glue("name", value, display=False)``) and its
text quotes it (``{glue:text}`name:.3f```); MyST-NB fills the quote in. Neither Colab nor
a reader's environment has myst-nb, so ``scripts/editions.py`` writes the notebooks with
``from lncourse.glue import glue`` instead, and fills every quote with the value of the
site's executed build. This ``glue`` keeps the value (:func:`glued` reads it back) and
shows it only where the site shows it (``display=True``): with ``display=False`` it
prints nothing, as on the site.
"""

from __future__ import annotations

from typing import Any

__all__ = ["glue", "glued", "GLUED"]

GLUED: dict[str, Any] = {}    # name -> the value last glued under it, in this kernel


def glue(name: str, variable: Any, display: bool = True) -> None:
    """Keep ``variable`` under ``name``; show it, as Jupyter would, when ``display``."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"glue needs a non-empty name (a str), got {name!r}")
    GLUED[name] = variable
    if display:
        from IPython.display import display as show

        show(variable)


def glued(name: str) -> Any:
    """The value glued under ``name`` in this kernel; a clear error if there is none."""
    try:
        return GLUED[name]
    except KeyError:
        raise KeyError(f"nothing was glued under {name!r} (glued so far: "
                       f"{', '.join(sorted(GLUED)) or 'nothing'})") from None
