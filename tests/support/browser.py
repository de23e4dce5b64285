"""Debian's Chromium, headless, driven by Selenium through Debian's chromedriver.

The flags are those of the Airflow UI test (``tests/integration/test_ui_airflow.py``); ``offline``
adds a host resolver that finds no host, so a page that reaches for the network fails here the way
it fails on a machine without internet, whether or not this one has it.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
PAGE_TIMEOUT = 60
FLAGS = (
    "--headless=new",
    "--no-sandbox",  # root has no user namespace sandbox here
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",  # without these it stalls on this closed network
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
NO_NETWORK = "--host-resolver-rules=MAP * ~NOTFOUND"


@contextlib.contextmanager
def chromium(*, offline: bool = False, window: str = "1400,1000") -> Iterator[Any]:
    """A headless Chromium session, quit after the block."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.fail("Debian's chromium and chromium-driver are not installed; run scripts/setup.sh")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    with tempfile.TemporaryDirectory(prefix="cdc-chromium-") as profile:
        for flag in (*FLAGS, f"--window-size={window}", f"--user-data-dir={profile}", *([NO_NETWORK] * offline)):
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
        driver.set_page_load_timeout(PAGE_TIMEOUT)
        try:
            yield driver
        finally:
            driver.quit()
