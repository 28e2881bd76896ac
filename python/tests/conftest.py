"""pytest configuration of the c128 binding's tests.

- Marker ``gpu``: the tests that need a CUDA device and PyTorch or CuPy (they skip with a
  message otherwise). ``pytest -m "not gpu"`` is the CPU suite, ``pytest -m gpu`` the GPU one.
- The ``checked`` fixture records what a test verified; the list is printed at the end of the
  run ("c128: what was checked"), so a GPU run says what it proved.
- With C128_PYTEST_SKIP_STATUS set (meson test sets 77), a run in which every selected test
  skipped exits with that status, which meson reports as SKIP.
"""

from __future__ import annotations

import os
from typing import List

import pytest

_checked: List[str] = []
_outcomes = {"passed": 0, "failed": 0, "skipped": 0}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA device and PyTorch or CuPy (skipped otherwise)")


@pytest.fixture
def checked():
    """Call checked(text) to record a verified property for the end-of-run summary."""
    return _checked.append


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _outcomes[report.outcome] = _outcomes.get(report.outcome, 0) + 1


def pytest_terminal_summary(terminalreporter) -> None:
    if _checked:
        terminalreporter.section("c128: what was checked")
        for line in _checked:
            terminalreporter.write_line(line)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    status = os.environ.get("C128_PYTEST_SKIP_STATUS")
    if status and exitstatus == 0 and _outcomes["skipped"] and not _outcomes["passed"] and not _outcomes["failed"]:
        session.exitstatus = int(status)
