"""Background processes of the embedded stack: start detached, find again by pid file, stop cleanly.

Each service runs in its own session (process group), so stopping it stops every child it forked,
and a pid file under the run folder lets a later ``status`` or ``down`` find it again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class StackError(RuntimeError):
    """A component of the stack failed; the message names it and the log to read."""


def wait_until(
    condition: Callable[[], T],
    *,
    timeout: float,
    what: str,
    log: Path | None = None,
    interval: float = 0.25,
    alive: Callable[[], bool] | None = None,
) -> T:
    """Poll ``condition`` until it returns something true, and return that; never a fixed sleep.

    Raises :class:`StackError` after ``timeout`` seconds, or as soon as ``alive()`` turns false.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = condition()
            if found:
                return found
        except Exception:  # a service that is still starting refuses connections
            pass
        if alive is not None and not alive():
            raise StackError(f"{what}: the process exited while starting.{_log_hint(log)}")
        if time.monotonic() >= deadline:
            raise StackError(f"{what}: not ready after {timeout:.0f}s.{_log_hint(log)}")
        time.sleep(interval)


def answers(check: Callable[[], object]) -> bool:
    """``check()`` is true; a service that refuses the connection (still starting, stopped) is not."""
    try:
        return bool(check())
    except Exception:
        return False


def _log_hint(log: Path | None) -> str:
    if log is None:
        return ""
    tail = ""
    if log.exists():
        lines = log.read_text(errors="replace").splitlines()[-15:]
        tail = "\n  | " + "\n  | ".join(lines) if lines else ""
    return f" See {log}{tail}"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


class ManagedProcess:
    """One long-running service started detached, tracked by ``<run>/pids/<name>.pid``."""

    def __init__(self, name: str, pid_file: Path, log_file: Path) -> None:
        self.name = name
        self.pid_file = pid_file
        self.log_file = log_file

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return pid if pid_alive(pid) else None

    def running(self) -> bool:
        return self.pid() is not None

    def start(self, argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> int:
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(
                list(argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=cwd,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        self.pid_file.write_text(str(proc.pid))
        return proc.pid

    def stop(self, *, timeout: float = 30.0) -> bool:
        """SIGTERM the whole process group, SIGKILL what is left after ``timeout``; True if it ran."""
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        self.signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if pid_alive(pid):
            self.signal(signal.SIGKILL)
            wait_until(lambda: not pid_alive(pid), timeout=10, what=f"{self.name} (SIGKILL)")
        self._reap(pid)
        self.pid_file.unlink(missing_ok=True)
        return True

    def kill(self) -> None:
        """``kill -9`` the service: the crash the fault tests inject."""
        pid = self.pid()
        if pid is None:
            raise StackError(f"{self.name} is not running; nothing to kill")
        self.signal(signal.SIGKILL)
        wait_until(lambda: not pid_alive(pid), timeout=10, what=f"{self.name} (SIGKILL)")
        self._reap(pid)
        self.pid_file.unlink(missing_ok=True)

    def signal(self, sig: int) -> None:
        pid = self.pid()
        if pid is None:
            return
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:
            os.kill(pid, sig)

    @staticmethod
    def _reap(pid: int) -> None:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
