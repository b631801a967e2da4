"""Helper library for *The Geometry of LayerNorm*.

One module per concept: :mod:`lncourse.layernorm` (chapter 1), :mod:`lncourse.folding`
(chapter 1), :mod:`lncourse.selectability.exact` (chapter 2), :mod:`lncourse.majority.task`
(chapter 3), :mod:`lncourse.nope.variance` (chapter 4), plus shared pieces: a small GPT
(:mod:`lncourse.transformer`), its training loop (:mod:`lncourse.lm`), the Shakespeare
corpus (:mod:`lncourse.text`), all-MiniLM-L6-v2 (:mod:`lncourse.minilm`), exercise checks
(:mod:`lncourse.checks`) and figures (:mod:`lncourse.plotting`).
"""

__version__ = "0.1.0"
