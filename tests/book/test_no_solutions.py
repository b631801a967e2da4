"""A course without solutions: LNCOURSE_NO_SOLUTIONS=1 makes scripts/editions.py write
the student notebooks only, and the site's extension drop every solution and the link
to the solution notebook (``LNCOURSE_NO_SOLUTIONS=1 bash scripts/build_site.sh``)."""

import sys

from docutils import nodes
from sphinx_exercise.nodes import solution_node

from conftest import ROOT


def test_editions_write_no_solution_notebook(tmp_path, monkeypatch):
    import editions
    (tmp_path / "solution").mkdir()
    (tmp_path / "solution" / "stale.ipynb").write_text("{}")
    monkeypatch.setenv("LNCOURSE_NO_SOLUTIONS", "1")
    editions.main(["--out", str(tmp_path), str(ROOT / "book" / "01_layernorm_geometry.md")])
    assert [p.relative_to(tmp_path).as_posix() for p in sorted(tmp_path.rglob("*.ipynb"))] == [
        "student/01_layernorm_geometry.ipynb"]


def test_the_site_extension_drops_solutions_and_their_link(monkeypatch):
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    import notebook_links
    doc = nodes.document(None, None)
    section = nodes.section()
    section += nodes.title(text="Chapter")
    section += solution_node()
    section += nodes.paragraph(text="kept")
    doc += section

    class App:
        class env:
            docname = "book/01_layernorm_geometry"

        class config:
            html_theme_options = {"repository_url": "https://github.com/o/r"}
            lncourse_notebook_branch = "gh-pages"

    monkeypatch.setenv("LNCOURSE_NO_SOLUTIONS", "1")
    notebook_links._links(App, doc)
    assert not list(doc.findall(solution_node))
    assert "kept" in doc.astext() and "solution notebook" not in doc.astext()
    monkeypatch.delenv("LNCOURSE_NO_SOLUTIONS")
    doc2 = nodes.document(None, None)
    doc2 += nodes.section()
    doc2[0] += solution_node()
    notebook_links._links(App, doc2)
    assert list(doc2.findall(solution_node)) and "solution notebook" in doc2.astext()
