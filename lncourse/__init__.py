"""Helper library for *The Geometry of LayerNorm*.

Where things live (AUTHORING.md has the whole map). Two layers, the course and the
evidence beneath it:

* the core, at the root, which every chapter uses: LayerNorm (:mod:`.layernorm`) and
  folding it (:mod:`.folding`), attention, the small GPT and its training loop
  (:mod:`.transformer`, :mod:`.lm`; its recipe and the reference losses, :mod:`.lm_recipe`),
  text, MiniLM, SmolLM2 (:mod:`.smollm2`), rng, device, progress, stored results (writing
  them, and reading one with its provenance: :mod:`.results`) and checkpoints, modes, the
  papers' numbers (:mod:`.paper`), intervals over seeds (:mod:`.summary`), the figures'
  style (:mod:`.plotting`) and the guard the exercise checks call a learner's function
  through (:mod:`.guard`);
* one folder per chapter, holding its science and its figures: :mod:`.geometry`
  (chapter 1), :mod:`.selectability` (2), :mod:`.majority` (3), :mod:`.nope` (4),
  :mod:`.norms` (5);
* the exercise checks in one folder, :mod:`.checks`, a module per chapter
  (``from lncourse.checks import nope as checks``), which the grader's sandbox hides from
  a learner;
* the evidence beneath: :mod:`.evidence`, a folder per chapter with its long runs, the
  readings of its stored runs, its claims and its ledger, which the replication pages and
  the tests use and nothing of the course imports;
* grading apart: :mod:`.grading`.

A chapter folder imports the core and never another chapter (``tests/test_package.py``).
"""

__version__ = "0.1.0"
