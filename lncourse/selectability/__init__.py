"""Chapter 2, unselectable keys: exact selectability (:mod:`.exact`, :mod:`.search`), the
experiments (:mod:`.experiments`), the language-model run (:mod:`.lm`), its tables and
curves (:mod:`.tables`) and figures; the seeded runs and their readings are
:mod:`lncourse.evidence.selectability`."""
