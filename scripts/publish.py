"""What the site publishes for a Colab reader's first cell: a code-only wheel of lncourse
and the stored results, one archive per folder of ``results/``, apart.

A build tool, not part of ``lncourse``: ``python scripts/publish.py --out _build/html``
(``scripts/build_site.sh`` runs it). Both go under ``<out>/lncourse/<commit>/`` (the
first 12 hex digits of the commit the notebooks are generated from):

* ``lncourse-<version>+g<commit>-py3-none-any.whl``: the package's code only (about
  0.3 MB), without the teacher's key to the checks (``TEACHER_ONLY``: every check's
  reference and known mistakes; the checks carry their stored outputs instead). It
  carries ``lncourse/_published.json``, which says where the results of that commit are
  published and the SHA-256 of each archive;
* ``results/<folder>.zip``: ``results/<folder>/`` (checkpoints stay in the checkout),
  downloaded by ``lncourse.results`` the first time a chapter loads a result from that
  folder, checked against its SHA-256 and cached.

The published copy is the ``gh-pages`` branch of ``_config.yml``'s repository, read
through ``raw.githubusercontent.com`` (:func:`published_url`); the notebooks' first cell
installs the wheel from there.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from myst import ROOT, commit, repository

PUBLISHED_JSON = "_published.json"      # inside the wheel: lncourse/_published.json
# what never leaves the checkout: resumable runs' checkpoints, and Python's leftovers
SKIP = {"checkpoints", "__pycache__"}
# What the chapters read of results/: every
# stored result (JSON) and the one set of weights a chapter loads, chapter 5's QK-norm
# gains. The runs' held-out predictions (.npz) and other weights are for the tests that
# recompute the files, not for readers (chapter 4's 34 MB of predictions among them).
# A chapter that starts reading another file fails in the simulated Colab of
# tests/book/test_colab.py until it is added here: chapter 4's lesson reads a 1.9 MB
# slice of those predictions (lncourse.evidence.nope.stream_read --lesson), chapter 5's
# slice of SmolLM2's residual stream (lncourse.evidence.norms.massive).
PUBLISHED_FILES = ("*.json", "norms/logits.pt", "nope/stream_paper_lesson_predictions.npz",
                   "norms/massive_arrays.npz")
# What of lncourse/ a reader never gets: the teacher's key to the exercise checks (every
# reference and known mistake, lncourse.checks.key), which would hand a learner the
# answers. pyproject.toml does not list it either; the copy leaves it out all the same.
TEACHER_ONLY = ("checks/key",)


def published_url(root: Path = ROOT) -> str:
    """The published site's files as raw URLs: the ``gh-pages`` branch (the site's
    ``lncourse_notebook_branch``) of ``_config.yml``'s repository on GitHub."""
    import yaml

    url, _ = repository(root)
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    branch = config.get("sphinx", {}).get("config", {}).get("lncourse_notebook_branch",
                                                              "gh-pages")
    owner_repo = re.sub(r"^https?://github\.com/", "", url).removesuffix(".git")
    return f"https://raw.githubusercontent.com/{owner_repo}/{branch}"


def short(sha: str) -> str:
    return sha[:12]


def version(root: Path = ROOT) -> str:
    """The package's version in ``pyproject.toml``."""
    text = (root / "pyproject.toml").read_text(encoding="utf-8")
    return re.search(r'^version = "([^"]+)"', text, re.M).group(1)


def wheel_name(sha: str, root: Path = ROOT) -> str:
    return f"lncourse-{version(root)}+g{short(sha)}-py3-none-any.whl"


def wheel_url(sha: str, root: Path = ROOT, base: str | None = None) -> str:
    """Where the first cell finds the wheel of commit ``sha``."""
    return f"{base or published_url(root)}/lncourse/{short(sha)}/{wheel_name(sha, root)}"


def results_archives(out: Path, root: Path = ROOT) -> dict[str, dict]:
    """``results/<folder>/`` zipped into ``out/<folder>.zip``, one per folder;
    returns {folder: {"sha256", "bytes", "files"}}."""
    out.mkdir(parents=True, exist_ok=True)
    made = {}
    for folder in sorted(p for p in (root / "results").iterdir()
                         if p.is_dir() and p.name not in SKIP):
        files = sorted(f for f in folder.rglob("*") if f.is_file()
                       and not SKIP & set(f.relative_to(folder).parts)
                       and any(f.relative_to(root / "results").match(pattern)
                               for pattern in PUBLISHED_FILES))
        if not files:
            continue
        path = out / f"{folder.name}.zip"
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
            for f in files:     # fixed dates: the same files give the same archive
                info = zipfile.ZipInfo(f.relative_to(root / "results").as_posix(),
                                       (1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(info, f.read_bytes())
        data = path.read_bytes()
        made[folder.name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
                             "files": len(files)}
    return made


def package_tree(package: Path, dest: Path) -> Path:
    """A copy of ``package`` (lncourse/) at ``dest`` as the wheel is built from: no
    Python leftovers, nothing of ``TEACHER_ONLY``."""
    leftovers = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")

    def ignore(folder: str, names: list[str]) -> set[str]:
        here = Path(folder).relative_to(package)
        return set(leftovers(folder, names)) | {
            n for n in names if (here / n).as_posix() in TEACHER_ONLY}
    shutil.copytree(package, dest, ignore=ignore)
    return dest


def code_wheel(out: Path, sha: str, results_url: str, archives: dict,
               root: Path = ROOT) -> Path:
    """A wheel of the checkout's code (no results), versioned ``<version>+g<commit>``,
    carrying ``lncourse/_published.json`` (commit, results URL, archives)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        text = (root / "pyproject.toml").read_text(encoding="utf-8")
        text = re.sub(r'^version = "([^"]+)"', rf'version = "\1+g{short(sha)}"', text,
                      count=1, flags=re.M)
        (src / "pyproject.toml").write_text(text, encoding="utf-8")
        shutil.copy(root / "README.md", src / "README.md")
        package_tree(root / "lncourse", src / "lncourse")
        (src / "lncourse" / PUBLISHED_JSON).write_text(json.dumps(
            {"commit": sha, "results_url": results_url, "archives": archives}, indent=1))
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob("lncourse-*.whl"):
            old.unlink()
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                               "--no-build-isolation", "-w", str(out), str(src)],
                              capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"pip wheel failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    (wheel,) = out.glob("lncourse-*.whl")
    return wheel


def publish(out: Path, root: Path = ROOT, sha: str | None = None,
            base: str | None = None) -> dict:
    """The wheel and the results archives of commit ``sha`` (default: the checkout's)
    under ``out/lncourse/<commit>/``; ``base`` is the URL ``out`` is published at
    (default :func:`published_url`). Returns what was written."""
    sha = sha or commit(root)
    if not sha:
        raise RuntimeError("not a git checkout: the published wheel is named by its commit")
    base = (base or published_url(root)).rstrip("/")
    folder = Path(out) / "lncourse" / short(sha)
    shutil.rmtree(folder, ignore_errors=True)
    archives = results_archives(folder / "results", root)
    results_url = f"{base}/lncourse/{short(sha)}/results"
    wheel = code_wheel(folder, sha, results_url, archives, root)
    return {"wheel": str(wheel), "wheel_bytes": wheel.stat().st_size,
            "wheel_url": wheel_url(sha, root, base), "results_url": results_url,
            "archives": archives}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "_build" / "html"),
                        help="the site's folder (lncourse/<commit>/ goes below it)")
    parser.add_argument("--base-url", default=None,
                        help="the URL --out is published at (default: the gh-pages branch "
                             "of _config.yml's repository, raw)")
    args = parser.parse_args(argv)
    made = publish(Path(args.out), base=args.base_url)
    sizes = ", ".join(f"{k} {v['bytes'] / 1e6:.1f} MB" for k, v in made["archives"].items())
    print(f"[publish] {made['wheel']} ({made['wheel_bytes'] / 1e6:.2f} MB); results: {sizes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
