"""The exercises of every chapter: what a learner writes and what checks it.

Exercise N.k of chapter N asks for one function, ``function``, checked by
``lncourse.checks.check_<function>``. The autograder (``python -m lncourse.grade``) grades
by this table, never by what a submitted notebook says about itself; a test keeps it in
step with the chapter sources (``book/NN_topic.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Exercise", "Chapter", "CHAPTERS", "chapter"]


@dataclass(frozen=True)
class Exercise:
    label: str      # the MyST label, e.g. "ex-layer-norm-fgh": the grade sheet's column
    number: str     # "1.1"
    title: str
    function: str   # the function the learner writes

    @property
    def check(self) -> str:
        """The name of the check in ``lncourse.checks``."""
        return f"check_{self.function}"


@dataclass(frozen=True)
class Chapter:
    stem: str       # "01_layernorm_geometry", the source's file name without .md
    title: str
    exercises: tuple[Exercise, ...]

    @property
    def number(self) -> int:
        return int(self.stem[:2])


def _chapter(stem: str, title: str, *exercises: tuple[str, str, str]) -> Chapter:
    n = int(stem[:2])
    return Chapter(stem, title, tuple(Exercise(label, f"{n}.{k}", t, function)
                                      for k, (label, t, function) in enumerate(exercises, 1)))


CHAPTERS: tuple[Chapter, ...] = (
    _chapter("01_layernorm_geometry", "LayerNorm is a projection and a scaling",
             ("ex-layer-norm-fgh", "LayerNorm from f, g and h", "layer_norm_fgh"),
             ("ex-centering-matrix", "Build the centring matrix", "centering_matrix"),
             ("ex-layer-norm-on-plane", "Two points from a plane", "layer_norm_on_plane"),
             ("ex-fold-into-linear", "Fold LayerNorm into a linear layer", "fold_into_linear"),
             ("ex-rms-norm", "RMSNorm", "rms_norm_gain"),
             ("ex-layer-norm-jacobian", "The Jacobian of LayerNorm", "layer_norm_jacobian")),
    _chapter("02_unselectable_keys", "Unselectable keys: what LayerNorm's scaling buys attention",
             ("ex-hull-vertices-2d", "Vertices in the plane", "hull_vertices_2d"),
             ("ex-unselectable-lp", "The LP that decides", "unselectable_lp"),
             ("ex-ellipsoid-query", "A query for every key on an ellipsoid", "ellipsoid_query"),
             ("ex-braid-reflect", "The braid-reflect walk", "braid_reflect")),
    _chapter("03_majority", "Majority: the projection, queries along 1, and a replication",
             ("ex-has-clear-majority", "The margin rule", "has_clear_majority"),
             ("ex-uniform-query-weights", "Queries parallel to 1", "uniform_query_weights"),
             ("ex-attend-counts", "Attention over a multiset", "attend_counts"),
             ("ex-norm-without-projection", "LayerNorm without projection",
              "norm_without_projection"),
             ("ex-query-angle", "The query angle", "query_angle")),
    _chapter("04_nope", "NoPE: positions hide in the variance of attention",
             ("ex-running-mean", "Uniform causal attention is a running mean", "running_mean"),
             ("ex-sample-covariance", "Lemma 1 numerically", "sample_covariance"),
             ("ex-fit-loglog-slope", "Fit the log-log slope", "fit_loglog_slope"),
             ("ex-masked-attention", "A causal or a bidirectional mask", "masked_attention"),
             ("ex-effective-tokens", "The effective number of attended tokens",
              "effective_tokens")),
)


def chapter(key: str | int) -> Chapter:
    """A chapter by stem ("01_layernorm_geometry"), number (1 or "1") or source path."""
    text = str(key).rsplit("/", 1)[-1].removesuffix(".md").removesuffix(".ipynb")
    for ch in CHAPTERS:
        if text in (ch.stem, str(ch.number), f"{ch.number:02d}"):
            return ch
    raise KeyError(f"no chapter {key!r}; the chapters are "
                   + ", ".join(ch.stem for ch in CHAPTERS))
