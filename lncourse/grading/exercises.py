"""The exercises of every chapter: what a learner writes and what checks it.

Exercise N.k of chapter N asks for one function, ``function``, checked by
``lncourse.checks.check_<function>``. The autograder (``python -m lncourse.grading.grade``) grades
by this table, never by what a submitted notebook says about itself; a test keeps it in
step with the chapter sources (``book/NN_topic.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Exercise", "Chapter", "CHAPTERS", "chapter"]


@dataclass(frozen=True)
class Exercise:
    label: str      # the MyST label, e.g. "ex-layer-norm-fgh": the grade sheet's column
    number: str     # "1.1"
    title: str
    function: str   # the function the learner writes
    points: int = 1  # the chapter's weight for it: its number of stars of difficulty

    @property
    def check(self) -> str:
        """The name of the check in ``lncourse.checks``."""
        return f"check_{self.function}"


@dataclass(frozen=True)
class Chapter:
    stem: str       # "01_layernorm_geometry", the source's file name without .md
    title: str
    exercises: tuple[Exercise, ...]
    # modules the grader's learner process imports once, before it forks a child per
    # exercise (what the exercises' code imports, and the helpers their checks forbid);
    # not part of the table the sources define (``tests/book/test_editions.py``)
    preload: tuple[str, ...] = field(default=(), compare=False)

    @property
    def number(self) -> int:
        return int(self.stem[:2])


# (label, title, function, points): the points are the exercise's stars of difficulty in
# the chapter (a test checks them against book/NN_topic.md)
def _chapter(stem: str, title: str, *exercises: tuple, preload: tuple[str, ...] = ()) -> Chapter:
    n = int(stem[:2])
    return Chapter(stem, title, tuple(Exercise(label, f"{n}.{k}", t, function, *points)
                                      for k, (label, t, function, *points)
                                      in enumerate(exercises, 1)), preload)


CHAPTERS: tuple[Chapter, ...] = (
    _chapter("01_layernorm_geometry", "LayerNorm is a projection and a scaling",
             ("ex-layer-norm-fgh", "LayerNorm from f, g and h", "layer_norm_fgh", 1),
             ("ex-centering-matrix", "Build the centring matrix", "centering_matrix", 1),
             ("ex-layer-norm-on-plane", "Two points from a plane", "layer_norm_on_plane", 1),
             ("ex-rms-norm", "RMSNorm", "rms_norm_gain", 1),
             ("ex-layer-norm-jacobian", "The Jacobian of LayerNorm", "layer_norm_jacobian", 2),
             ("ex-fold-into-linear", "Fold LayerNorm into a linear layer", "fold_into_linear", 1),
             ("ex-layer-norm-backward", "LayerNorm's backward pass, on MiniLM",
              "layer_norm_backward", 3)),
    _chapter("02_unselectable_keys", "Unselectable keys: what LayerNorm's scaling buys attention",
             ("ex-hull-vertices-2d", "Vertices in the plane", "hull_vertices_2d", 2),
             ("ex-unselectable-lp", "The LP that decides", "unselectable_lp", 1),
             ("ex-braid-reflect", "The braid-reflect walk", "braid_reflect", 2),
             ("ex-ellipsoid-query", "A query for every key on an ellipsoid", "ellipsoid_query", 1),
             ("ex-causal-unselectable", "The keys a causal head chooses from",
              "causal_unselectable", 2),
             preload=("scipy.spatial", "scipy.optimize", "lncourse.selectability.exact",
                      "lncourse.selectability.experiments")),
    # chapter 2's replication page: no exercises (after the lesson, so "2" finds the lesson)
    _chapter("02_unselectable_keys_replication", "Reproducing Brody et al.: Tables 1 and 2"),
    _chapter("03_majority", "Majority: averaging, and queries along 1",
             ("ex-has-clear-majority", "The margin rule", "has_clear_majority", 1),
             ("ex-uniform-query-weights", "Queries parallel to 1", "uniform_query_weights", 1),
             ("ex-attend-counts", "Attention over a multiset", "attend_counts", 2),
             ("ex-norm-without-projection", "LayerNorm without projection",
              "norm_without_projection", 1),
             ("ex-projection-main-effect", "The projection's main effect, from the runs",
              "projection_main_effect", 2),
             ("ex-query-angle", "The query angle", "query_angle", 1),
             preload=("lncourse.majority.task",)),
    # chapter 3's replication page: no exercises (after the lesson, so "3" finds the lesson)
    _chapter("03_majority_replication", "Reproducing Brody et al.: the majority task (Figures 1 to 3)"),
    _chapter("04_nope", "NoPE: positions hide in the variance of attention",
             ("ex-sample-covariance", "Lemma 1 numerically", "sample_covariance", 1),
             ("ex-running-mean", "Uniform causal attention is a running mean", "running_mean", 1),
             ("ex-fit-loglog-slope", "Fit the log-log slope", "fit_loglog_slope", 1),
             ("ex-effective-tokens", "The effective number of attended tokens",
              "effective_tokens", 2),
             ("ex-masked-attention", "A causal or a bidirectional mask", "masked_attention", 1),
             ("ex-posterior-median", "Read a posterior by its median",
              "posterior_median", 1),
             ("ex-cross-fitted-mae", "Calibrate a probe on other sequences",
              "cross_fitted_mae", 3),
             preload=("lncourse.nope.variance",)),
    _chapter("04_nope_replication",
             "Reproducing Chi et al.: the position probe and trained NoPE models"),
    _chapter("05_norms", "Today's normalisations through the lenses",
             ("ex-dyt", "Dynamic tanh", "dyt", 1),
             ("ex-qk-norm-scores", "QK-norm in a head", "qk_norm_scores", 2),
             ("ex-qk-logit-bound", "The largest logit of a QK-normed head",
              "qk_logit_bound", 1),
             ("ex-bigram-loss", "The bigram yardstick", "bigram_loss", 2),
             ("ex-chance-abs-cos", "The chance level of cos(h, 1)", "chance_abs_cos", 2),
             ("ex-fraction-along-ones", "How much of h lies along 1", "fraction_along_ones", 1),
             ("ex-peak-ratio", "What RMSNorm does to a massive activation", "peak_ratio", 1)),
    # chapter 5's replication page: no exercises (after the lesson, so "5" finds the lesson)
    _chapter("05_norms_replication", "Reproducing chapter 5: today's norms, measured"),
)


def chapter(key: str | int) -> Chapter:
    """A chapter by stem ("01_layernorm_geometry"), number (1 or "1") or source path."""
    text = str(key).rsplit("/", 1)[-1].removesuffix(".md").removesuffix(".ipynb")
    for ch in CHAPTERS:
        if text in (ch.stem, str(ch.number), f"{ch.number:02d}"):
            return ch
    raise KeyError(f"no chapter {key!r}; the chapters are "
                   + ", ".join(ch.stem for ch in CHAPTERS))
