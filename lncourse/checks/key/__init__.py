"""The teacher's key to the exercise checks: every check's reference and the known
mistakes it names, one module per check module (``key/norms.py`` for
``checks/norms.py``), each with ``REFERENCES`` (exercise -> the reference; none for an
exercise judged by a property) and ``MISTAKES`` (exercise -> [(message, the wrong
answer)]).

It is the teacher's alone: ``pyproject.toml`` does not list it and ``scripts/publish.py``
leaves it out of the published wheel, so a learner's install cannot read or call an
answer. A check judges the visible inputs against the outputs stored from it
(``lncourse/checks/expected/<module>.pt``, written by ``python -m
lncourse.checks.key.store``) and imports it only for the teacher-only inputs
(``hidden=True``, the grader's ``--hidden``), in the teacher's checkout.
"""
