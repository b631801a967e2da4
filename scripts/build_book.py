"""``jupyter-book`` with Sphinx's parallel reading of pages.

Jupyter Book 1's command line has no ``-j``, although its ``build_sphinx`` takes ``jobs``
and every extension of this book declares itself safe for parallel reading. With
``LNCOURSE_BUILD_JOBS=N`` (default 1) this runs the same command line with ``jobs=N``:
Sphinx reads (and MyST-NB executes) the pages in N processes, each a chunk of the pages in
name order. ``scripts/test.sh`` builds with 2, so the site is ready sooner while the other
lane runs the unit tests beside it.

    python scripts/build_book.py build . --builder html -n -W --keep-going
"""

import functools
import os
import sys


def main() -> None:
    jobs = int(os.environ.get("LNCOURSE_BUILD_JOBS", "1") or 1)
    if jobs < 1:
        sys.exit(f"LNCOURSE_BUILD_JOBS must be a positive integer, got {jobs}")
    import jupyter_book.sphinx

    jupyter_book.sphinx.build_sphinx = functools.partial(jupyter_book.sphinx.build_sphinx,
                                                         jobs=jobs)
    from jupyter_book.cli.main import main as cli

    cli()


if __name__ == "__main__":
    main()
