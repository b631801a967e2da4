"""Chapter 4, NoPE: the variance of causal attention (:mod:`.variance`), the lemmas (:mod:`.lemmas`), the position probe (:mod:`.probe`), the trained NoPE model (:mod:`.lm`) and figures."""
