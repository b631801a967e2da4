"""Chapter 5, today's normalisations (the modules themselves, with every other norm of the
course, are the core's :mod:`lncourse.layernorm`): per-head selectability on random keys
(:mod:`.heads`), the statistics of hidden states (:mod:`.hidden`), the majority arms
(:mod:`.majority`), the V lens (:mod:`.vlens`) and figures; its exercise checks are
:mod:`lncourse.checks.norms`; the measurements on SmolLM2 and MiniLM, the trained runs,
the claims and the ledger are :mod:`lncourse.evidence.norms`."""
