"""Write the bytecode of the modules the course's processes import, and only those.

``scripts/setup_env.sh`` runs this once per installed lock, with bytecode writing on
(``PYTHONDONTWRITEBYTECODE`` removed from its environment). It imports every module of
``lncourse`` and the tools that run the course (kernels, the build, the tests), so that
each of those modules is compiled once, here, and not again in every process that
imports it: this machine and CI set ``PYTHONDONTWRITEBYTECODE=1``, and the grader's
learners see the environment read-only, so without the ``.pyc`` files every kernel and
learner would compile torch's modules on import, which roughly doubles the grader's
tests.

Only what these imports reach is compiled (about 2,300 files), not the whole
environment (about 16,000, with uv's ``--compile-bytecode``): the rest is never
imported. A module that nothing imports here and something imports later is compiled
by the first process that imports it (``scripts/test.sh`` and ``scripts/build_site.sh``
let their processes write bytecode).

    python scripts/warm_imports.py      # prints how many modules it imported
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import warnings

# The tools around lncourse: the kernels and the notebooks' own imports, the site build,
# the editions, the student runs, the browser checks and the test runner.
TOOLS = ("torch", "torch.nn.functional", "numpy", "scipy.spatial", "scipy.stats",
         "matplotlib.pyplot", "IPython", "ipykernel.kernelapp", "ipywidgets", "nbclient",
         "nbformat", "jupytext", "papermill", "jupyter_cache", "myst_nb", "myst_parser",
         "sphinx", "jupyter_book", "nbval", "pytest", "playwright.sync_api")


def main() -> int:
    if sys.flags.dont_write_bytecode:
        print("warm_imports: bytecode writing is off (unset PYTHONDONTWRITEBYTECODE)",
              file=sys.stderr)
        return 2
    import lncourse

    names = list(TOOLS) + ["lncourse"] + [
        m.name for m in pkgutil.walk_packages(lncourse.__path__, "lncourse.")]
    failed = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in names:
            try:
                importlib.import_module(name)
            except Exception as exc:  # noqa: BLE001 (an optional tool that is missing)
                failed.append(f"{name} ({type(exc).__name__})")
    print(f"[setup] bytecode written for {len(sys.modules)} modules"
          + (f"; not importable here: {', '.join(failed)}" if failed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
