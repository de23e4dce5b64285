"""A person's path through the Airflow UI, in a real browser: log in, open the DAG, trigger it with a
non-default Param through the trigger form, and watch the run succeed.

Debian's Chromium, headless, driven by Selenium through Debian's chromedriver (a test tool's own
browser download cannot be fetched on this network). Airflow runs on the test stack, started by
the project's code (``airflow_stack`` fixture). The screenshot lands in ``test-artifacts/``.

The module starts from a stack reset to empty data (``airflow_stack``) and sorts last among the
integration modules, so what it leaves (loader rows, sealed ranges) is seen by no other module.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import pytest
import requests

from cdc_dev.loader import run_loader
from cdc_dev.stack import Stack, StackConfig
from cdc_reconcile import kafka_offsets
from cdc_reconcile.config import default_config
from tests.support.polling import eventually

# About 9 minutes (a stack reset, Airflow, a run through the scheduler): `-m browser` or `-m slow`; the
# test command's DAG runs go through `airflow dags test` (test_reconciliation_dag.py)
pytestmark = [pytest.mark.integration, pytest.mark.browser, pytest.mark.slow]

# What the test triggers: the DAG, one of its Params, and a value other than the Param's default.
DAG_ID = "cdc_reconciliation"
PARAM = "mode"
VALUE: Any = "check_only"
LABEL = "Check only (fail on differences)"  # how the form shows VALUE (the Param's values_display)
RUN_TIMEOUT = 900  # seconds for the triggered run to finish (Spark jobs on 2 cores)
UI_TIMEOUT = 60  # seconds for one page state to appear

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


def api(config: StackConfig) -> requests.Session:
    """A REST session with a token from the simple auth manager (same user as the UI)."""
    response = requests.post(
        f"{config.airflow_url}/auth/token",
        json={"username": config.airflow_user, "password": config.airflow_password},
        timeout=10,
    )
    response.raise_for_status()
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {response.json()['access_token']}"
    return session


def wait_for(check: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.5) -> Any:
    """:func:`eventually`, where exceptions count as "not yet": stale or missing elements while React re-renders."""
    return eventually(check, timeout=timeout, what=what, interval=interval, retry_on=(Exception,))


@pytest.fixture(scope="module")
def browser(artifacts: Path) -> Iterator[Any]:
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.fail("Debian's chromium and chromium-driver are not installed; run scripts/setup.sh")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    profile = tempfile.TemporaryDirectory(prefix="cdc-chromium-")
    for flag in (
        "--headless=new",
        "--no-sandbox",  # root has no user namespace sandbox here
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",  # without these it stalls on this closed network
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1400,1000",
        f"--user-data-dir={profile.name}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(UI_TIMEOUT)
    try:
        yield driver
    finally:
        driver.quit()
        profile.cleanup()


def login(driver, config: StackConfig) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{config.airflow_url}/")
    wait_for(lambda: driver.find_element(By.NAME, "username").is_displayed(), timeout=UI_TIMEOUT, what="login form")
    driver.find_element(By.NAME, "username").send_keys(config.airflow_user)
    driver.find_element(By.NAME, "password").send_keys(config.airflow_password)
    button(driver, "Sign in").click()
    wait_for(lambda: "/auth/login" not in driver.current_url, timeout=UI_TIMEOUT, what="logged in")


def button(driver, text: str, within=None):
    """The displayed button whose visible text or aria-label is ``text``."""
    from selenium.webdriver.common.by import By

    root = within or driver
    for element in root.find_elements(By.XPATH, f".//button[normalize-space(.)='{text}' or @aria-label='{text}']"):
        if element.is_displayed() and element.is_enabled():
            return element
    raise LookupError(f"no enabled button {text!r}")


def field_selector(name: str) -> str:
    """A Param's field in the trigger form: a select's container carries the id, inputs the name."""
    return f"#element_{name}, [name='element_{name}']"


def set_param(driver, dialog, name: str, value: Any, label: str | None = None) -> None:
    """Set one Param in the trigger form the way a person would, for the field kinds Airflow renders:
    an enum as a select (pick the option by the label it shows), a boolean as a switch, else text."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    container = dialog.find_element(By.CSS_SELECTOR, field_selector(name))
    comboboxes = container.find_elements(By.CSS_SELECTOR, "input[role=combobox]")
    if comboboxes:
        comboboxes[0].click()
        option = wait_for(
            lambda: next(
                o
                for o in driver.find_elements(By.XPATH, f"//*[@role='option'][normalize-space(.)='{label or value}']")
                if o.is_displayed()
            ),
            timeout=UI_TIMEOUT,
            what=f"option {value!r} of Param {name!r}",
        )
        option.click()
        field = dialog.find_element(By.NAME, f"element_{name}")
        wait_for(
            lambda: field.get_attribute("value") in (str(value), label),
            timeout=10,
            what=f"{name} selected",
        )
        return
    if container.get_attribute("type") == "checkbox":
        if container.is_selected() != bool(value):
            container.find_element(By.XPATH, "./ancestor::label[1]").click()
        wait_for(lambda: container.is_selected() == bool(value), timeout=10, what=f"{name} switched")
        return
    container.send_keys(Keys.CONTROL, "a")
    container.send_keys(Keys.DELETE)
    container.send_keys(value if isinstance(value, str) else json.dumps(value))


def run_badge(driver, run_id: str) -> str:
    """The state badge next to the run's heading on the run page ("Queued", "Running", "Success"...)."""
    from selenium.webdriver.common.by import By

    badge = driver.find_element(
        By.XPATH, f"//h2[contains(normalize-space(.), '{run_id}')]/parent::*//*[@data-testid='state-badge']"
    )
    return badge.text.strip()


def test_trigger_with_a_param_from_the_ui_and_see_the_run_succeed(airflow_stack: Stack, browser, artifacts: Path):
    config = airflow_stack.config
    dag_file = config.airflow_dags_folder / f"{DAG_ID}.py"
    if not dag_file.exists():
        pytest.skip(f"{dag_file} does not exist yet (CDC_TEST_AIRFLOW_DAGS_FOLDER points at another DAG folder)")
    from selenium.webdriver.common.by import By

    # Debezium creates a table's topic with its first event; the run reconciles rows that exist
    run_loader(config.pg_dsn, rate=0, count=60, mix={"insert": 1.0}, seed=7)
    for table in default_config().tables:
        wait_for(
            lambda t=table: kafka_offsets.list_partitions(config.bootstrap_servers, t.topic, timeout=5),
            timeout=120,
            what=f"topic {table.topic}",
        )
    rest = api(config)
    dag = wait_for(
        lambda: (r := rest.get(f"{config.airflow_url}/api/v2/dags/{DAG_ID}", timeout=10)).ok and r.json(),
        timeout=180,
        what=f"DAG {DAG_ID} parsed by the DAG processor",
    )
    assert not dag["is_paused"], "airflow.cfg leaves new DAGs unpaused"
    default = rest.get(f"{config.airflow_url}/api/v2/dags/{DAG_ID}/details", timeout=10).json()["params"][PARAM]
    assert default.get("value") != VALUE, f"{VALUE!r} is {PARAM}'s default; pick another value"

    driver = browser
    try:
        login(driver, config)
        driver.get(f"{config.airflow_url}/dags/{quote(DAG_ID)}")
        wait_for(lambda: button(driver, "Trigger Dag"), timeout=UI_TIMEOUT, what="Trigger button").click()
        dialog = wait_for(
            lambda: next(d for d in driver.find_elements(By.CSS_SELECTOR, "[role=dialog]") if d.is_displayed()),
            timeout=UI_TIMEOUT,
            what="trigger form",
        )
        wait_for(
            lambda: dialog.find_element(By.CSS_SELECTOR, field_selector(PARAM)),
            timeout=UI_TIMEOUT,
            what=f"Param {PARAM}",
        )
        set_param(driver, dialog, PARAM, VALUE, LABEL)
        button(driver, "Trigger", within=dialog).click()

        # The UI moves to the new run's page: /dags/<dag_id>/runs/<run_id>.
        run_id = wait_for(
            lambda: "/runs/" in driver.current_url and unquote(driver.current_url.rsplit("/runs/", 1)[1]),
            timeout=UI_TIMEOUT,
            what="run page after triggering",
        )
        # While the Spark jobs run, the browser leaves the page: the UI's live refresh would take a
        # core of the two from them. The run's end is awaited through the REST API, then shown.
        run_url = driver.current_url
        driver.get("about:blank")
        run_path = f"{config.airflow_url}/api/v2/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}"
        wait_for(
            lambda: rest.get(run_path, timeout=10).json()["state"] in ("success", "failed"),
            timeout=RUN_TIMEOUT,
            what=f"run {run_id} finished",
            interval=3,
        )
        driver.get(run_url)
        state = wait_for(
            lambda: (s := run_badge(driver, run_id)) in ("Success", "Failed", "Upstream Failed") and s,
            timeout=UI_TIMEOUT,
            what=f"run {run_id}'s final state on its page",
        )
        driver.save_screenshot(str(artifacts / "airflow_ui_run.png"))
    except BaseException:
        driver.save_screenshot(str(artifacts / "airflow_ui_failure.png"))
        raise

    run = rest.get(f"{config.airflow_url}/api/v2/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}", timeout=10).json()
    assert run["conf"].get(PARAM) == VALUE, f"the form sent conf {run['conf']}"
    assert run["run_type"] == "manual"
    assert state == "Success" and run["state"] == "success", f"run {run_id}: UI {state}, API {run['state']}"
