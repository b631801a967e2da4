"""Chapter 4, NoPE: the variance of causal attention (:mod:`.variance`), the lemmas
(:mod:`.lemmas`), the small NoPE language model (:mod:`.lm`) and figures; the position
probe, the trained runs and the ledger are :mod:`lncourse.evidence.nope`."""
