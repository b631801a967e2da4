"""Chapter 1's exercise checks (LayerNorm as geometry): those of the maps
(:mod:`.layernorm`) and of the derivatives (:mod:`.layernorm_grad`)."""

from lncourse.checks.layernorm import (  # noqa: F401
    check_centering_matrix, check_fold_into_linear, check_layer_norm_fgh,
    check_layer_norm_on_plane, check_rms_norm_gain,
)
from lncourse.checks.layernorm_grad import (  # noqa: F401
    check_layer_norm_backward, check_layer_norm_jacobian,
)

__all__ = ["check_layer_norm_fgh", "check_centering_matrix", "check_layer_norm_on_plane",
           "check_rms_norm_gain", "check_layer_norm_jacobian", "check_fold_into_linear",
           "check_layer_norm_backward"]
