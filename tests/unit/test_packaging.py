"""pyproject.toml: metadata setuptools builds without a deprecation warning, and ``[all]``
installs every optional extra (the brief: pinned ranges in extras that ``[all]`` includes)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())


def test_license_is_an_spdx_string_for_a_setuptools_that_reads_it() -> None:
    # A TOML table here makes setuptools >= 77 print a BuildBackendWarning on every install.
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    requires = PYPROJECT["build-system"]["requires"]
    setuptools = [r for r in requires if r.startswith("setuptools")]
    found = re.fullmatch(r"setuptools>=(\d+)(\.\d+)*", setuptools[0]) if setuptools else None
    assert found and int(found[1]) >= 77, requires


def test_all_includes_every_extra_but_dev() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    (spec,) = extras["all"]
    named = set(re.fullmatch(r"ragport\[([^\]]+)\]", spec)[1].split(","))  # type: ignore[index]
    assert named == set(extras) - {"all", "dev"}
