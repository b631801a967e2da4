"""scripts/publish.py: what the site publishes for a Colab reader's first cell (issue 33)."""

import zipfile

from conftest import ROOT
from publish import published_url, results_archives, wheel_name, wheel_url


def test_results_archives_hold_what_chapters_read_and_no_checkpoint(tmp_path):
    for name in ("results/nope/a.json", "results/nope/a_predictions.npz",
                 "results/nope/trained.pt", "results/norms/logits.pt", "results/norms/b.json",
                 "results/checkpoints/run.ckpt", "results/checkpoints/c.json",
                 "results/nope/__pycache__/x.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    made = results_archives(tmp_path / "out", tmp_path)
    assert sorted(made) == ["nope", "norms"]
    names = {f: sorted(zipfile.ZipFile(tmp_path / "out" / f"{f}.zip").namelist()) for f in made}
    assert names == {"nope": ["nope/a.json"], "norms": ["norms/b.json", "norms/logits.pt"]}
    again = results_archives(tmp_path / "again", tmp_path)       # the same bytes each time
    assert {f: m["sha256"] for f, m in again.items()} == {f: m["sha256"] for f, m in made.items()}


def test_the_wheel_is_named_and_served_by_its_commit():
    sha = "0123456789abcdef0123456789abcdef01234567"
    assert wheel_name(sha, ROOT) == "lncourse-0.1.0+g0123456789ab-py3-none-any.whl"
    assert wheel_url(sha, ROOT) == (published_url(ROOT) + "/lncourse/0123456789ab/"
                                    "lncourse-0.1.0+g0123456789ab-py3-none-any.whl")
    assert published_url(ROOT) == \
        "https://raw.githubusercontent.com/layernorm-geometry/course/gh-pages"
