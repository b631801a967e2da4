"""Chapter 1, LayerNorm as geometry: its figures (:mod:`.figures`). The science of
chapter 1 is the core's (:mod:`lncourse.layernorm`, :mod:`lncourse.folding`); its exercise
checks are :mod:`lncourse.checks.geometry`; its claims, :mod:`lncourse.evidence.geometry`."""
