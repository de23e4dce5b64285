"""The DAG file's import rules: it imports only Airflow, the standard library and the Airflow adapter,
and parsing it (as Airflow's DAG processor does) loads none of the engine's heavy dependencies.

The engine's own rules (no Airflow, no dev tools) are import-linter contracts in pyproject.toml.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DAG_FILE = REPO / "dags" / "cdc_reconciliation.py"
ADAPTER = "cdc_reconcile.orchestration"
NOT_AT_PARSE_TIME = ("pyspark", "confluent_kafka", "great_expectations", "psycopg", "cdc_dev")
RESULT_PREFIX = "DAG_PARSE_RESULT "

# Runs in a fresh interpreter so that nothing this test session imported counts. DagBag's own
# machinery is loaded first (an empty folder), so the figures are what the DAG file costs.
PARSE_SCRIPT = """
import json, sys, tempfile, time
from airflow.dag_processing.dagbag import DagBag

with tempfile.TemporaryDirectory() as empty:
    DagBag(dag_folder=empty)
before = set(sys.modules)
start = time.perf_counter()
bag = DagBag(dag_folder=sys.argv[1])
seconds = time.perf_counter() - start
print(sys.argv[2] + json.dumps({
    "seconds": seconds,
    "modules_loaded": len(set(sys.modules) - before),
    "modules_total": len(sys.modules),
    "top_level_loaded": sorted({name.split(".")[0] for name in sys.modules}),
    "product_loaded": sorted(name for name in sys.modules if name.startswith("cdc_reconcile")),
    "dags": sorted(bag.dags),
    "applications": sorted({t.application for d in bag.dags.values() for t in d.tasks if hasattr(t, "application")}),
    "import_errors": {str(path): str(error) for path, error in bag.import_errors.items()},
}))
"""


def _is_allowed(module: str) -> bool:
    top = module.split(".")[0]
    return (
        module == "__future__"
        or top in sys.stdlib_module_names
        or top == "airflow"
        or module == ADAPTER
        or module.startswith(ADAPTER + ".")
    )


def _imported_modules(tree: ast.AST) -> list[tuple[int, str, bool]]:
    """(line, module, allowed) for every import statement, at any depth of the file."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, _is_allowed(alias.name)) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            # `from cdc_reconcile import orchestration` names the adapter through its parent.
            allowed = node.level == 0 and (
                _is_allowed(module) or all(_is_allowed(f"{module}.{alias.name}") for alias in node.names)
            )
            found.append((node.lineno, module, allowed))
    return found


def parse_dag_folder(
    dag_folder: Path, airflow_home: Path, *, python: str = sys.executable, env: dict | None = None, cwd: Path
) -> dict:
    """Parse ``dag_folder`` with DagBag in a fresh interpreter, with a fresh AIRFLOW_HOME and no connections,
    variables or Airflow settings from the caller's environment."""
    env = {key: value for key, value in (os.environ if env is None else env).items() if not key.startswith("AIRFLOW")}
    env.update(AIRFLOW_HOME=str(airflow_home), AIRFLOW__CORE__LOAD_EXAMPLES="False")
    done = subprocess.run(
        [python, "-c", PARSE_SCRIPT, str(dag_folder), RESULT_PREFIX],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=cwd,
    )
    assert done.returncode == 0, f"the DAG parse exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    assert lines, f"the DAG parse printed no result:\n{done.stdout}\n{done.stderr}"
    return json.loads(lines[-1].removeprefix(RESULT_PREFIX))


def test_the_dag_file_imports_only_airflow_the_standard_library_and_the_adapter():
    imports = _imported_modules(ast.parse(DAG_FILE.read_text(), filename=str(DAG_FILE)))
    assert any(module.startswith(ADAPTER) or module == "cdc_reconcile" for _, module, _ in imports)
    offending = [f"line {line}: {module}" for line, module, allowed in imports if not allowed]
    assert offending == [], f"{DAG_FILE.name} imports outside airflow, the stdlib and {ADAPTER}: {offending}"


def test_the_import_rule_rejects_the_engine_and_relative_imports():
    tree = ast.parse(
        "from cdc_reconcile import orchestration\n"
        "from cdc_reconcile.orchestration.tasks import job\n"
        "from airflow.sdk import dag\n"
        "import datetime as dt\n"
        "from cdc_reconcile.config import default_config\n"
        "from cdc_reconcile import orchestration, storage\n"
        "import pyspark.sql\n"
        "from . import helpers\n"
        "def f():\n"
        "    import cdc_dev\n"
    )
    assert [(line, allowed) for line, _, allowed in _imported_modules(tree)] == [
        (1, True),
        (2, True),
        (3, True),
        (4, True),
        (5, False),
        (6, False),
        (7, False),
        (8, False),
        (10, False),
    ]


def test_parsing_the_dag_loads_neither_spark_kafka_great_expectations_postgres_nor_the_dev_tools(tmp_path):
    parsed = parse_dag_folder(DAG_FILE.parent, tmp_path / "airflow-home", cwd=tmp_path)
    print(
        f"DAG parse: {parsed['seconds']:.2f} s, {parsed['modules_loaded']} modules loaded by the DAG file "
        f"({parsed['modules_total']} in sys.modules)"
    )
    assert parsed["import_errors"] == {}
    assert "cdc_reconciliation" in parsed["dags"]
    loaded = [name for name in NOT_AT_PARSE_TIME if name in parsed["top_level_loaded"]]
    assert loaded == [], f"parsing the DAG imports {loaded}; product modules loaded: {parsed['product_loaded']}"
