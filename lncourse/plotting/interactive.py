"""The course's one way to make a widget: a figure redrawn whenever a control moves."""

from __future__ import annotations

from typing import Any, Callable

from matplotlib.figure import Figure

__all__ = ["interactive_figure"]


def interactive_figure(draw: Callable[..., Figure], **controls: Any):
    """A widget (``ipywidgets.interactive``) showing ``draw(**values)``, redrawn on change.

    ``draw`` takes one keyword argument per control and returns a figure built by a
    :mod:`lncourse.plotting` function. ``controls``: name -> an ipywidgets control
    (``FloatSlider(...)``) or an abbreviation ``ipywidgets.interact`` understands
    (``(min, max, step)``, a list of options). End a cell with the returned widget; such
    cells carry the tag ``remove-cell``, and the site shows the static figure instead::

        plotting.interactive_figure(
            lambda angle: plotting.keys_hull_2d(keys, selectable, angle=angle),
            angle=widgets.FloatSlider(value=0.6, min=0.0, max=6.28, step=0.05))
    """
    import ipywidgets as widgets
    from IPython.display import display

    def show(**values: Any) -> None:
        display(draw(**values))

    return widgets.interactive(show, **controls)
