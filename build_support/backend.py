"""setuptools' build backend, with the console's front-end assets fetched first (build_support/console_assets.py),
so an editable install and every wheel carry them without their being committed."""

from __future__ import annotations

from typing import Any

from console_assets import fetch
from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  # every hook setuptools defines, unchanged unless below


def build_wheel(wheel_directory: str, config_settings: Any = None, metadata_directory: str | None = None) -> str:
    fetch()
    return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory: str, config_settings: Any = None, metadata_directory: str | None = None) -> str:
    fetch()
    return _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
