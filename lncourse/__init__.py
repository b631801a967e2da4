"""Helper library for *The Geometry of LayerNorm*.

Where things live (AUTHORING.md has the whole map):

* the core, at the root, which every chapter uses: LayerNorm (:mod:`.layernorm`) and
  folding it (:mod:`.folding`), attention, the small GPT and its training loop
  (:mod:`.transformer`, :mod:`.lm`; its recipe and the reference losses, :mod:`.lm_recipe`),
  text, MiniLM, SmolLM2 (:mod:`.smollm2`), rng, device,
  progress, stored results and checkpoints, modes, the papers' numbers (:mod:`.paper`), claims and summaries
  (:mod:`.claims`, :mod:`.summary`), the figures' style (:mod:`.plotting`) and the guard
  the exercise checks call a learner's function through (:mod:`.guard`);
* one folder per chapter, holding its science, its figures and its command lines:
  :mod:`.geometry` (chapter 1), :mod:`.selectability` (2), :mod:`.majority` (3),
  :mod:`.nope` (4), :mod:`.norms` (5);
* the exercise checks of every chapter in one folder, :mod:`.checks`
  (``from lncourse import checks``), which the grader's sandbox hides from a learner;
* grading apart: :mod:`.grading`, which no science module imports.

A chapter folder imports the core and never another chapter (``tests/test_package.py``).
"""

__version__ = "0.1.0"
