"""lncourse.glue: the notebooks' glue, which needs no myst-nb (issue 33)."""

import ast

import pytest

from lncourse import glue as glue_module
from lncourse.glue import glue, glued


def test_glue_keeps_the_value_and_shows_it_only_when_asked(capsys):
    glue("test_glue_a", 0.25, display=False)
    assert glued("test_glue_a") == 0.25
    assert capsys.readouterr().out == ""          # display=False: nothing shown, as on the site
    glue("test_glue_a", [1, 2])                   # display=True: shown as Jupyter shows it
    assert glued("test_glue_a") == [1, 2] and "[1, 2]" in capsys.readouterr().out


def test_glue_refuses_a_bad_name_and_says_what_was_glued():
    with pytest.raises(TypeError, match="non-empty name"):
        glue("", 1)
    glue("test_glue_b", 1, display=False)
    with pytest.raises(KeyError, match="test_glue_b"):
        glued("test_glue_missing")


def test_glue_needs_no_myst_nb():
    tree = ast.parse(open(glue_module.__file__, encoding="utf-8").read())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not {m for m in imported if m and m.split(".")[0] == "myst_nb"}, imported
