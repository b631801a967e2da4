"""The same figure laid out for a phone's column: panels stacked, drawn narrow, with text
that a phone shows at no less than ``PHONE_MIN_TEXT_PX`` (issue 19: on a 390 px phone,
25 of 28 figures had text under 9 px, multi-panel ones about 5 px).

The site's build (``LNCOURSE_SITE_FIGURES=1``, set by ``scripts/build_site.sh``) stores
this second PNG inside the figure's PNG (text chunk ``PHONE_PNG_KEY``); the site's
extension ``book/_ext/phone_figures.py`` takes it out and serves it to narrow screens with
``<picture>``. In Jupyter and Colab nothing changes.
"""

from __future__ import annotations

import base64
import io
import os
import pickle

import matplotlib as mpl
from matplotlib.figure import Figure
from matplotlib.gridspec import GridSpec

PHONE_COLUMN_PX = 358       # the text column of a 390 px wide phone, in CSS pixels
PHONE_MIN_TEXT_PX = 10.0    # the smallest text of a phone's figure, in CSS pixels at 1x
PHONE_PNG_KEY = "lncourse-phone-png"   # PNG text chunk: the phone's PNG, base64
SITE_ENV = "LNCOURSE_SITE_FIGURES"


def site_figures() -> bool:
    """Whether figures are being drawn for the site (which adds the phone's version)."""
    return os.environ.get(SITE_ENV, "") not in ("", "0")


def _texts(fig: Figure):
    return [t for t in fig.findobj(mpl.text.Text) if t.get_visible() and t.get_text().strip()]


def stack_panels(fig: Figure) -> int:
    """Put ``fig``'s panels one under the other, in reading order (left to right, then
    top to bottom); axes that share a cell (twins) stay together, colorbars follow their
    axes. Returns the number of rows (1: nothing to stack, or a layout it leaves alone)."""
    panels = [a for a in fig.axes if a.get_subplotspec() is not None]
    if not panels:
        return 1
    specs = [a.get_subplotspec() for a in panels]
    grid = specs[0].get_gridspec()
    if any(s.get_gridspec() is not grid for s in specs):
        return 1                       # nested grids: keep the author's layout
    cells: dict[tuple, list] = {}
    for a, s in zip(panels, specs):
        cells.setdefault((s.rowspan.start, s.colspan.start, s.rowspan.stop, s.colspan.stop),
                         []).append(a)
    if grid.get_geometry()[1] == 1 or len(cells) == 1:
        return len(cells)
    rows = GridSpec(len(cells), 1, figure=fig)
    for k, key in enumerate(sorted(cells)):
        for a in cells[key]:
            a.set_subplotspec(rows[k, 0])
    for main, *_twins in cells.values():
        _show_shared_labels(main, [c[0] for c in cells.values()])
    return len(cells)


def _show_shared_labels(a, mains) -> None:
    """Panels that shared an axis showed its tick labels and label once (``sharey``: the
    first column only); stacked, each panel shows its own."""
    for name, side in (("y", "labelleft"), ("x", "labelbottom")):
        axis = getattr(a, f"{name}axis")
        siblings = [b for b in getattr(a, f"get_shared_{name}_axes")().get_siblings(a)
                    if b is not a and b in mains]
        if not siblings:
            continue
        axis.set_tick_params(which="both", **{side: True})
        if not axis.get_label_text():
            text = next((t for b in siblings
                         if (t := getattr(b, f"{name}axis").get_label_text())), "")
            axis.set_label_text(text)


def phone_figure(fig: Figure, column_px: float = PHONE_COLUMN_PX,
                 min_px: float = PHONE_MIN_TEXT_PX) -> Figure | None:
    """A copy of ``fig`` laid out for a phone: panels stacked, ``column_px`` wide, each
    panel as tall as it is wide in ``fig`` (within limits), all text scaled by one factor
    so that its smallest is ``min_px``. None if the figure cannot be copied."""
    try:
        phone = pickle.loads(pickle.dumps(fig))
    except Exception:   # a figure holding something unpicklable keeps its one layout
        return None
    nrows, ncols = (fig.axes[0].get_subplotspec().get_gridspec().get_geometry()
                    if fig.axes and fig.axes[0].get_subplotspec() else (1, 1))
    cell_w, cell_h = fig.get_figwidth() / ncols, fig.get_figheight() / nrows
    rows = stack_panels(phone)
    width = column_px / phone.dpi
    height = rows * min(max(width * cell_h / cell_w, 0.55 * width), 1.1 * width) \
        if rows > 1 else min(max(width * fig.get_figheight() / fig.get_figwidth(),
                                 0.55 * width), 1.2 * width)
    phone.set_size_inches(width, height)
    texts = _texts(phone)
    if texts:
        factor = min_px / (min(t.get_fontsize() for t in texts) * phone.dpi / 72)
        for t in texts:
            t.set_fontsize(t.get_fontsize() * factor)
    for title in [a.title for a in phone.axes] + ([phone._suptitle] if phone._suptitle else []):
        title.set_wrap(True)
    return phone


def phone_png(fig: Figure, text_key: str, facecolor, column_px: float = PHONE_COLUMN_PX,
              min_px: float = PHONE_MIN_TEXT_PX) -> bytes | None:
    """The phone's PNG of ``fig`` (see :func:`phone_figure`), drawn at 2x, at most
    ``column_px`` wide at 1x on ``facecolor``, its smallest text in 1x pixels in the chunk
    ``text_key`` (both from plotting.style, which imports this module)."""
    from PIL import Image

    phone = phone_figure(fig, column_px, min_px)
    if phone is None:
        return None
    for _ in range(4):   # what is wider than the column: legends in one column, then narrower
        smallest = min((t.get_fontsize() for t in _texts(phone)), default=0.0) * phone.dpi / 72
        buffer = io.BytesIO()
        phone.savefig(buffer, format="png", dpi=2 * phone.dpi, bbox_inches="tight",
                      facecolor=facecolor, metadata={text_key: f"{smallest:.2f}"})
        data = buffer.getvalue()
        width = Image.open(io.BytesIO(data)).size[0] / 2
        if width <= column_px + 0.5:
            break
        wide = [legend for legend in phone.legends
                if legend._ncols > 1 and legend._outside_loc == "lower"]   # legend_below
        for legend in wide:
            _one_column(phone, legend)
        if not wide:
            phone.set_figwidth(phone.get_figwidth() * (column_px - 2) / width)
    return data


def _one_column(fig: Figure, legend) -> None:
    """``legend`` (one of ``legend_below``'s) again, in one column."""
    labels = [t.get_text() for t in legend.texts]
    size = legend.texts[0].get_fontsize() if legend.texts else None
    handles = legend.legend_handles
    legend.remove()
    fig.legend(handles, labels, loc="outside lower center", ncols=1, fontsize=size)


def encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
