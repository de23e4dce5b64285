"""The product installs and works on its own: its wheel, in a fresh virtualenv outside the checkout and
without the development tools, imports the Airflow adapter, parses the DAG and runs each Spark job's --help.

The new virtualenv sees the third-party packages of the one running the tests through a plain path
entry (a ``.pth`` line naming its site-packages). Python processes ``.pth`` files only in site
directories, so the editable installs of this checkout (``.pth`` files in the shared folder) stay
invisible: the product comes from the wheel alone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

from .test_import_rules import DAG_FILE, parse_dag_folder

REPO = Path(__file__).resolve().parents[2]
JOBS = ("snapshot_source", "compact_cdc", "validate", "reconcile")


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=300, **kwargs)


def _succeeded(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert done.returncode == 0, f"{done.args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def outside(tmp_path_factory) -> Path:
    """A working folder outside the checkout."""
    folder = tmp_path_factory.mktemp("outside-checkout")
    assert not folder.is_relative_to(REPO)
    return folder


@pytest.fixture(scope="module")
def wheel(outside: Path) -> Path:
    """The product wheel, built from a copy of the checkout's build inputs (pyproject.toml and the other
    top-level files, and the package folders) so that setuptools' build/ and egg-info folders stay out
    of the checkout and no stale build output ends up in the wheel."""
    source = outside / "source"
    source.mkdir()
    for path in REPO.iterdir():
        if path.is_file():
            shutil.copy2(path, source / path.name)
    package_roots = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    for root in package_roots["where"]:
        shutil.copytree(REPO / root, source / root, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    wheels = outside / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    _succeeded(
        _run([*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(wheels), str(source)])
    )
    (built,) = wheels.glob("cdc_reconcile-*.whl")
    return built


@pytest.fixture(scope="module")
def clean_env() -> dict[str, str]:
    """The caller's environment without anything that would put this checkout or another venv on the path."""
    dropped = {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV"}
    env = {key: value for key, value in os.environ.items() if key not in dropped and not key.startswith("AIRFLOW")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


@pytest.fixture(scope="module")
def product_python(wheel: Path, outside: Path, clean_env: dict[str, str]) -> Path:
    """The interpreter of a fresh virtualenv holding the product wheel and, as plain paths, the
    third-party packages of the running interpreter."""
    venv = outside / "venv"
    _succeeded(_run([sys.executable, "-m", "venv", "--without-pip", str(venv)]))
    python = venv / "bin" / "python"
    # Installed before the shared packages become visible, so pip sees no other cdc-reconcile to replace.
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", str(python)]
    _succeeded(_run([*pip, "install", "-q", "--no-deps", "--no-index", str(wheel)], cwd=outside, env=clean_env))
    site_packages = _succeeded(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=outside, env=clean_env)
    ).stdout.strip()
    shared = dict.fromkeys(sysconfig.get_path(kind) for kind in ("purelib", "platlib"))
    (Path(site_packages) / "shared_third_party.pth").write_text("".join(f"{path}\n" for path in shared))
    return python


def test_the_wheel_holds_the_product_and_its_sql_but_not_the_dev_tools(wheel: Path):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry_points = next((archive.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt")), "")
    assert "cdc_reconcile/sql/state_schema.sql" in names
    downloaded = [name for name in names if name.endswith((".min.js", ".min.css", ".woff2"))]
    assert downloaded == [], "third-party files belong in the CDC_DATA_DOCS_ASSETS folder, not in the wheel"
    assert "cdc_reconcile/orchestration/tasks.py" in names
    assert [name for name in names if "cdc_dev" in Path(name).parts] == []
    assert "cdc_dev" not in entry_points, f"the product installs commands of the dev tools:\n{entry_points}"
    assert "cdc-tables = cdc_reconcile.tables_cli:main" in entry_points, entry_points


def test_in_the_product_venv_the_product_comes_from_the_wheel_and_the_dev_tools_are_absent(
    product_python: Path, outside: Path, clean_env: dict[str, str]
):
    where = _succeeded(
        _run(
            [str(product_python), "-c", "import cdc_reconcile; print(cdc_reconcile.__file__)"],
            cwd=outside,
            env=clean_env,
        )
    ).stdout.strip()
    assert Path(where).is_relative_to(product_python.parents[1]), where
    dev = _run([str(product_python), "-c", "import cdc_dev"], cwd=outside, env=clean_env)
    assert dev.returncode != 0 and "No module named 'cdc_dev'" in dev.stderr, dev.stderr


def test_the_adapter_imports_and_the_dag_parses_in_the_product_venv(
    product_python: Path, outside: Path, clean_env: dict[str, str]
):
    _succeeded(
        _run([str(product_python), "-c", "import cdc_reconcile.orchestration.tasks"], cwd=outside, env=clean_env)
    )
    dags = outside / "dags"
    dags.mkdir(exist_ok=True)
    shutil.copy2(DAG_FILE, dags / DAG_FILE.name)
    parsed = parse_dag_folder(dags, outside / "airflow-home", python=str(product_python), env=clean_env, cwd=outside)
    assert parsed["import_errors"] == {}
    assert "cdc_reconciliation" in parsed["dags"]
    for application in parsed["applications"]:
        assert Path(application).is_file() and Path(application).is_relative_to(product_python.parents[1]), application


@pytest.mark.parametrize("job", JOBS)
def test_each_spark_job_answers_help_in_the_product_venv(
    job: str, product_python: Path, outside: Path, clean_env: dict[str, str]
):
    done = _succeeded(
        _run([str(product_python), "-m", f"cdc_reconcile.jobs.{job}", "--help"], cwd=outside, env=clean_env)
    )
    assert "--run-id" in done.stdout
