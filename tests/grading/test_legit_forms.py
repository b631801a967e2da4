"""Right answers in forms the grader used to cut apart (issue 60, item 9): it runs only
the statements an exercise's function needs, and must find them as a run from the top
would: a name set through ``global`` in a set-up function, a function defined under
``if`` or ``try`` that calls a helper defined after it in the same cell, and a constant
filled by mutation (``CFG["axis"] = -1``, ``.append`` in a top-level loop,
``.update(...)``). Each is graded by the real checkers and passes."""

import pytest

from .test_grade import with_function
from .test_identities import books, write  # noqa: F401 (fixtures)
from lncourse.grading.exercises import chapter
from lncourse.grading.grade import grade
from lncourse.grading.submission import program_for, read_submission

CH = chapter(1)

GLOBAL = '''
def set_up():
    global SCALE
    SCALE = 1.0


set_up()


def rms_norm_gain(x, gain, eps):
    return SCALE * x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * gain
'''
UNDER_IF = '''
try:
    import scipy   # noqa: F401
except ImportError:
    pass
if True:
    def centering_matrix(d):
        return _eye(d) - torch.ones(d, d, dtype=torch.float64) / d


def _eye(d):
    return torch.eye(d, dtype=torch.float64)
'''
MUTATED = '''
CFG = {}
CFG["axis"] = -1
OPTIONS = dict()
OPTIONS.update(keepdim=True)
AXES = []
for a in [-1]:
    AXES.append(a)


def layer_norm_fgh(x, gamma, beta, eps):
    centred = x - x.mean(CFG["axis"], **OPTIONS)
    var = (centred * centred).mean(AXES[0], keepdim=True)
    return centred / torch.sqrt(var + eps) * gamma + beta
'''
FORMS = {"ex-rms-norm": GLOBAL, "ex-centering-matrix": UNDER_IF, "ex-layer-norm-fgh": MUTATED}


@pytest.fixture(scope="module")
def notebook(books, tmp_path_factory):
    nb = books["student"]
    for label, source in FORMS.items():
        nb = with_function(nb, label, source)
    return write(nb, tmp_path_factory.mktemp("forms") / "forms.ipynb")


@pytest.mark.parametrize("label", FORMS)
def test_the_statements_a_top_to_bottom_run_sets_are_taken(notebook, label):
    exercise = next(e for e in CH.exercises if e.label == label)
    program, problem = program_for(read_submission(notebook), exercise)
    assert problem is None
    code = "\n".join(program.code)
    needed = {"ex-rms-norm": ["set_up()", "global SCALE"],
              "ex-centering-matrix": ["def _eye(d)"],
              "ex-layer-norm-fgh": ["CFG['axis'] = -1", "OPTIONS.update(keepdim=True)",
                                    "AXES.append(a)"]}[label]
    for statement in needed:
        assert statement in code, (statement, code)


def test_each_form_passes_its_check(notebook):
    _, (g,) = grade([notebook], chapter=1, workers=1)
    for label in FORMS:
        assert g.outcomes[label].passed, (label, g.outcomes[label].message)


def test_a_module_call_is_no_mutation(tmp_path, books):
    """A module's attribute set or a module's function called at the top does not
    become a statement every function that uses the module runs, and a constant the
    function does not read is not run (a chapter's training must never run)."""
    nb = with_function(books["student"], "ex-centering-matrix", '''
torch.manual_seed(0)
torch.grading_note = "a module's attribute set at the top"
RESULTS = {}
RESULTS["slow"] = sum(range(10))


def centering_matrix(d):
    return torch.eye(d, dtype=torch.float64) - torch.ones(d, d, dtype=torch.float64) / d
''')
    exercise = next(e for e in CH.exercises if e.label == "ex-centering-matrix")
    program, _ = program_for(read_submission(write(nb, tmp_path / "nb.ipynb")), exercise)
    assert not any(w in c for c in program.code
                   for w in ("manual_seed", "grading_note", "RESULTS")), program.code
