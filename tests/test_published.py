"""lncourse.published: the stored results of the published wheel, downloaded when a chapter
first loads one, checked and cached (issue 33)."""

import hashlib
import json
import zipfile

import pytest

from lncourse import published


def _site(tmp_path, members, commit="0123456789abcdef"):
    """A published folder of results (one archive) and a manifest naming it."""
    site = tmp_path / "site"
    site.mkdir()
    with zipfile.ZipFile(site / "nope.zip", "w") as z:
        for name, text in members.items():
            z.writestr(name, text)
    data = (site / "nope.zip").read_bytes()
    manifest = {"commit": commit, "results_url": site.as_uri(),
                "archives": {"nope": {"sha256": hashlib.sha256(data).hexdigest(),
                                      "bytes": len(data), "files": len(members)}}}
    (tmp_path / "_published.json").write_text(json.dumps(manifest))
    return manifest


@pytest.fixture
def wheel(tmp_path, monkeypatch):
    """lncourse as the published wheel: a manifest, and a cache of its own."""
    monkeypatch.setattr(published, "MANIFEST", tmp_path / "_published.json")
    monkeypatch.setenv("LNCOURSE_CACHE", str(tmp_path / "cache"))
    published.manifest.cache_clear()
    yield tmp_path
    published.manifest.cache_clear()


def test_a_folder_is_downloaded_once_checked_and_unpacked(wheel, capsys):
    _site(wheel, {"nope/a.json": '{"x": 1}'})
    cache = published.cache_dir()
    assert cache == wheel / "cache" / "results" / "0123456789ab"
    assert published.fetch("nope", cache) == cache / "nope"
    assert json.loads((cache / "nope" / "a.json").read_text()) == {"x": 1}
    assert "downloaded the stored results of nope/" in capsys.readouterr().err
    (wheel / "site" / "nope.zip").unlink()              # the second time: from the cache
    assert published.fetch("nope", cache) == cache / "nope"
    assert published.fetch("norms", cache) is None       # not published: nothing to fetch


def test_a_wrong_archive_is_refused(wheel):
    manifest = _site(wheel, {"nope/a.json": "{}"})
    manifest["archives"]["nope"]["sha256"] = "0" * 64
    (wheel / "_published.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="SHA-256"):
        published.fetch("nope", published.cache_dir())
    assert not (published.cache_dir() / "nope").exists()


def test_an_archive_cannot_write_outside_its_folder(wheel):
    _site(wheel, {"nope/a.json": "{}", "nope/../../evil.json": "{}"})
    with pytest.raises(ValueError, match="unexpected member"):
        published.fetch("nope", published.cache_dir())
    assert not (wheel / "cache" / "evil.json").exists()


def test_nothing_is_downloaded_where_results_are_read_from_elsewhere(wheel, tmp_path):
    _site(wheel, {"nope/a.json": "{}"})
    assert published.fetch("nope", tmp_path / "checkout-results") is None
    assert not (published.cache_dir() / "nope").exists()


def test_a_checkout_has_no_manifest():
    published.manifest.cache_clear()
    assert published.manifest() is None          # the checkout reads results/ itself
