"""The stored results of the published wheel, downloaded when a chapter asks for them.

The wheel a Colab reader installs (``scripts/publish.py``, published with the site) holds
the code only, about 0.3 MB, and ``lncourse/_published.json``: the commit it was built
from, where that commit's stored results are published (one zip per folder of
``results/``) and each archive's SHA-256. :func:`fetch` downloads a folder the first time
a chapter loads a result from it (``lncourse.results.load_result``), checks it, and
unpacks it into :func:`cache_dir`; a chapter downloads only the folders it reads. A
checkout, or ``LNCOURSE_RESULTS``, never downloads anything.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import sys
import tempfile
import zipfile
from pathlib import Path

__all__ = ["manifest", "cache_dir", "fetch"]

MANIFEST = Path(__file__).resolve().parent / "_published.json"


@functools.cache
def manifest() -> dict | None:
    """``_published.json`` of the installed wheel ({"commit", "results_url", "archives":
    {folder: {"sha256", "bytes", "files"}}}), or None (a checkout, or a plain wheel)."""
    try:
        return json.loads(MANIFEST.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def cache_dir() -> Path:
    """Where the published results of this wheel's commit are unpacked:
    ``$LNCOURSE_CACHE/results/<commit>`` (default ``~/.cache/lncourse``)."""
    cache = Path(os.environ.get("LNCOURSE_CACHE") or Path.home() / ".cache" / "lncourse")
    return cache / "results" / manifest()["commit"][:12]


def fetch(folder: str, results_dir: Path) -> Path | None:
    """Make ``results_dir/<folder>`` present. Where ``results_dir`` is this wheel's cache
    and the folder is published but not yet there: download its archive, check its
    SHA-256 and unpack it, once. Returns the folder, or None where there is none."""
    results_dir = Path(results_dir)
    target = results_dir / folder
    if target.is_dir():
        return target
    published = manifest()
    if not published or folder not in published.get("archives", {}) \
            or results_dir != cache_dir():
        return None                      # results are read from elsewhere
    import urllib.request

    url = f"{published['results_url'].rstrip('/')}/{folder}.zip"
    try:
        with urllib.request.urlopen(url, timeout=120) as response:
            data = response.read()
    except OSError as err:
        raise OSError(f"could not download the stored results {url} ({err}); set "
                      "LNCOURSE_RESULTS to a copy of the repository's results/ "
                      "instead") from err
    digest, expected = hashlib.sha256(data).hexdigest(), published["archives"][folder]["sha256"]
    if digest != expected:
        raise ValueError(f"{url}: SHA-256 {digest}, not the published {expected} (an "
                         "archive of another commit?)")
    results_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=results_dir) as tmp:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for name in archive.namelist():          # nothing may land outside the folder
                parts = Path(name).parts
                if name.startswith("/") or ".." in parts or not parts or parts[0] != folder:
                    raise ValueError(f"{url}: unexpected member {name!r}")
            archive.extractall(tmp)
        try:
            os.replace(Path(tmp) / folder, target)
        except OSError:                               # another process unpacked it first
            if not target.is_dir():
                raise
    print(f"downloaded the stored results of {folder}/ ({len(data) / 1e6:.1f} MB) into "
          f"{results_dir}", file=sys.stderr)
    return target
