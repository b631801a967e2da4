"""The course's one way to make a widget: a figure redrawn whenever a control moves."""

from __future__ import annotations

import inspect
import os
from typing import Any, Callable

from matplotlib.figure import Figure

__all__ = ["interactive_figure", "widgets_enabled"]


def widgets_enabled() -> bool:
    """False when ``LNCOURSE_NO_WIDGETS`` is set (to anything but 0): the notebook runs
    with no front end to show widgets (the site build, the tests, the grader).

    There a widget is useless, and it is harmful: each one sends a burst of comm messages
    to the client, and nbclient (jupyter/nbclient#312) then sometimes misses the cell's
    reply and waits for its whole timeout, which stalled the course's test command.
    """
    return os.environ.get("LNCOURSE_NO_WIDGETS", "") in ("", "0")


def _start(name: str, spec: Any, draw: Callable) -> Any:
    """The value a control starts at: its ``value``, else ``draw``'s default for it,
    else the middle of a (min, max[, step]) range."""
    if isinstance(spec, dict) and "value" in spec:
        return spec["value"]
    if hasattr(spec, "value"):                      # an ipywidgets control
        return spec.value
    default = inspect.signature(draw).parameters[name].default
    if default is not inspect.Parameter.empty:
        return default
    if isinstance(spec, tuple):
        return (spec[0] + spec[1]) / 2
    if isinstance(spec, (list, tuple)):
        return spec[0]
    raise TypeError(f"cannot tell where the control {name!r} starts: give it a value")


def interactive_figure(draw: Callable[..., Figure], **controls: Any):
    """A widget (``ipywidgets.interactive``) showing ``draw(**values)``, redrawn on change.

    ``draw`` takes one keyword argument per control and returns a figure built by a
    :mod:`lncourse.plotting` function. ``controls``: name -> a dict of ``FloatSlider``
    arguments (``dict(value=20, min=-90, max=90, step=5, description="elevation")``), an
    abbreviation ``ipywidgets.interact`` understands (``(min, max, step)``, a list of
    options; it starts at ``draw``'s default) or a control already built. End a cell with
    the result; such cells carry the tag ``remove-cell``, and the site shows a static
    figure instead::

        plotting.interactive_figure(
            lambda angle=0.6: plotting.keys_hull_2d(keys, selectable, angle=angle),
            angle=dict(min=0.0, max=6.28, step=0.05))

    Without a front end (:func:`widgets_enabled` is False) no widget is built: the
    result is the static figure at the controls' starting values.
    """
    if not widgets_enabled():
        return draw(**{name: _start(name, spec, draw) for name, spec in controls.items()})
    import ipywidgets as widgets
    from IPython.display import display

    def show(**values: Any) -> None:
        display(draw(**values))

    built = {name: _control(widgets, name, spec, draw) for name, spec in controls.items()}
    return widgets.interactive(show, **built)


def _control(widgets, name: str, spec: Any, draw: Callable):
    """The widget for one control, built here at its starting value (:func:`_start`):
    ``show(**values)`` has no defaults, so an abbreviation handed to ``interactive``
    as it is would start at the middle of its range, not at ``draw``'s default."""
    if isinstance(spec, dict):
        return widgets.FloatSlider(**{"description": name,
                                      "value": _start(name, spec, draw), **spec})
    if isinstance(spec, tuple) and len(spec) in (2, 3):
        lo, hi, *step = spec
        start = _start(name, spec, draw)
        whole = all(isinstance(x, int) and not isinstance(x, bool)
                    for x in (*spec, start))
        slider = widgets.IntSlider if whole else widgets.FloatSlider
        return slider(min=lo, max=hi, value=start, description=name,
                      **({"step": step[0]} if step else {}))
    if isinstance(spec, list):
        return widgets.Dropdown(options=spec, value=_start(name, spec, draw),
                                description=name)
    return spec
