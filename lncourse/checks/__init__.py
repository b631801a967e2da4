"""Exercise checks: ``check_<function>(fn)`` judges a learner's function ``<function>``.

Each compares the function with a reference computed in float64 (or, where the exercise
asks for a property, checks that property) on fixed and edge-case inputs, prints one
line when it passes and returns None, and raises ``AssertionError`` naming the likely
mistake when it fails. ``hidden=True`` adds teacher-only inputs (used by the autograder,
``python -m lncourse.grading.grade --hidden``). Calls the exercise forbids (for example
``F.layer_norm`` when the exercise is to write LayerNorm) stop with a message, and so
does a call that runs past a time limit.
"""

from lncourse.checks._core import assert_signature, configure, run_check  # noqa: F401
from lncourse.checks.layernorm import (  # noqa: F401
    check_centering_matrix, check_fold_into_linear, check_layer_norm_fgh,
    check_layer_norm_on_plane, check_rms_norm_gain,
)
from lncourse.checks.layernorm_grad import (  # noqa: F401
    check_layer_norm_backward, check_layer_norm_jacobian,
)
from lncourse.checks.majority import (  # noqa: F401
    check_attend_counts, check_has_clear_majority, check_norm_without_projection,
    check_query_angle, check_uniform_query_weights,
)
from lncourse.checks.majority_stats import check_projection_main_effect  # noqa: F401
from lncourse.checks.selectability import (  # noqa: F401
    check_braid_reflect, check_causal_unselectable, check_ellipsoid_query,
    check_hull_vertices_2d, check_unselectable_lp,
)
from lncourse.checks.nope import (  # noqa: F401
    check_effective_tokens, check_fit_loglog_slope, check_masked_attention, check_running_mean,
    check_posterior_median, check_sample_covariance, check_cross_fitted_mae,
)
from lncourse.checks.norms import (  # noqa: F401
    check_bigram_loss, check_chance_abs_cos, check_dyt, check_fraction_along_ones,
    check_qk_logit_bound, check_qk_norm_scores,
)
