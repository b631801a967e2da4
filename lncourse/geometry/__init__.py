"""Chapter 1, LayerNorm as geometry: LayerNorm in floating point (:mod:`.numerics`: ε's
place, the variance's two formulas) and its figures (:mod:`.figures`). The rest of
chapter 1's science is the core's (:mod:`lncourse.layernorm`, :mod:`lncourse.folding`);
its exercise checks are :mod:`lncourse.checks.geometry`; its claims, which the tests
check on what the lesson computes, :mod:`lncourse.evidence.geometry`."""
