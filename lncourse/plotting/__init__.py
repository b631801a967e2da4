"""What every figure of the course shares: the style, the colours, the one way to get
axes, 3-d helpers and the one way to make a widget. Each chapter's figures live in its
folder (``lncourse.<chapter>.figures``); they take arrays (and an optional ``ax``: one
axes, or one per panel for a multi-panel figure), return a matplotlib ``Figure`` and never
call ``plt.show()``."""

from lncourse.plotting.interactive import interactive_figure, widgets_enabled  # noqa: F401
from lncourse.plotting.style import (  # noqa: F401
    COLORS, SERIES, band, blank_figure, figure_and_axes, new_figure, use_style, figure_png,
)
