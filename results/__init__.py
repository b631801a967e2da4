"""The course's stored results (results/<chapter>/<name>.json), installed with lncourse as
the package ``lncourse_results`` so that chapters find them outside a checkout (Colab).
Nothing to import: :mod:`lncourse.results` reads the files."""
