"""Chapter 2, unselectable keys: exact selectability (:mod:`.exact`), the experiments (:mod:`.experiments`), the language-model run (:mod:`.lm`), its tables (:mod:`.report`) and figures."""
