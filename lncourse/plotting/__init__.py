"""Every figure in the course: functions take arrays (and an optional ``ax``: one axes,
or one per panel for a multi-panel figure) and return a matplotlib ``Figure``; they never
call ``plt.show()``. Widgets: :func:`interactive_figure`, the one way to make one."""

from lncourse.geometry.figures import (  # noqa: F401
    attention_inputs, ellipse_in_plane, explore_ln_3d, folding_errors, ln_pipeline_3d,
    plane_to_two_points, variance_errors,
)
from lncourse.majority.figures import (  # noqa: F401
    VARIANT_LABELS, effects_forest, grid_summary, keys_queries_3d, majority_curves,
    steps_to_accuracy,
)
from lncourse.nope.figures import (  # noqa: F401
    cumulative_attention, lemma4_signal, probe_errors, sigma_sweep,
    variance_loglog,
)
from lncourse.selectability.figures import (  # noqa: F401
    fraction_vs_context, fraction_vs_dimension, fraction_vs_step, keys_hull_2d, layer_fractions,
    lm_loss_curves, unselectable_heatmaps,
)
from lncourse.plotting.interactive import interactive_figure, widgets_enabled  # noqa: F401
from lncourse.plotting.style import (  # noqa: F401
    COLORS, SERIES, band, blank_figure, figure_and_axes, legend_below, new_figure, use_style,
)
