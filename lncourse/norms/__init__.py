"""Chapter 5, today's normalisations: the normalisations as small modules (:mod:`.modules`:
RMSNorm, QK-norm, DyT, nGPT-style), per-head selectability on random keys
(:mod:`.heads`), the statistics of hidden states (:mod:`.hidden`), the
measurements on SmolLM2 and MiniLM (:mod:`.real`, ``python -m lncourse.norms.real``), the
chapter's claims checked against them (:mod:`.verdict`) and
figures; its exercise checks are in :mod:`lncourse.checks.norms`. The SmolLM2 loader itself is in the core (:mod:`lncourse.smollm2`)."""
