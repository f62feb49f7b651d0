"""Drive the system's headless Chromium from a test through ``driver.mjs`` (Playwright).

``Chromium(console_dir, tmp_dir)`` starts ``node driver.mjs`` with a fresh user data dir; its
methods send one JSON command each and return the answer or raise :class:`BrowserError`. Every
call is bounded (the command's own timeout plus a margin); ``close()`` ends the browser and node.
"""
from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CONSOLE_DIR = REPO / "console"
CHROMIUM_NAMES = ("chromium", "chromium-browser")


class BrowserError(AssertionError):
    pass


def find_chromium() -> Optional[str]:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def missing_parts() -> list[str]:
    """What the browser tests need and this machine lacks (empty when all is there)."""
    missing = []
    if not find_chromium():
        missing.append("chromium (apt-get install chromium)")
    if not shutil.which("node"):
        missing.append("node (apt-get install nodejs npm)")
    if not (CONSOLE_DIR / "node_modules" / "playwright-core").is_dir():
        missing.append("console/node_modules/playwright-core (cd console && npm ci)")
    if not (CONSOLE_DIR / "dist" / "index.html").is_file():
        missing.append("console/dist (cd console && npm run build)")
    return missing


class Chromium:
    def __init__(self, user_data_dir: Path, timeout: float = 20.0) -> None:
        self.timeout = timeout
        self.log: list[str] = []
        self._answers: "queue.Queue[dict]" = queue.Queue()
        self._next = 1
        user_data_dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            ["node", str(HERE / "driver.mjs"), str(CONSOLE_DIR), find_chromium() or "chromium",
             str(user_data_dir)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1"})
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()
        first = self._answer(0, 90.0)
        if not first.get("ok"):
            self.close()
            raise BrowserError(f"Chromium did not start: {first.get('error')}\n"
                               + "\n".join(self.log))
        self.version = first.get("value")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self._answers.put(json.loads(line))
            except ValueError:
                self.log.append(line.rstrip())
        self._answers.put({"id": None, "ok": False, "error": "the driver exited"})

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line.rstrip())

    def _answer(self, want: int, timeout: float) -> dict:
        try:
            while True:
                answer = self._answers.get(timeout=timeout)
                if answer.get("id") in (want, None):
                    return answer
        except queue.Empty:
            return {"ok": False, "error": f"no answer from the driver within {timeout}s"}

    def call(self, op: str, timeout: Optional[float] = None, **args: Any) -> Any:
        timeout = self.timeout if timeout is None else timeout
        ident = self._next
        self._next += 1
        command = {"id": ident, "op": op, "timeout": int(timeout * 1000), **args}
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(command) + "\n")
            self.proc.stdin.flush()
        except OSError as exc:
            raise BrowserError(f"{op}: the driver is gone ({exc})\n" + "\n".join(self.log))
        answer = self._answer(ident, timeout + 15)
        if not answer.get("ok"):
            raise BrowserError(f"{op} {args}: {answer.get('error')}")
        return answer.get("value")

    # conveniences
    def goto(self, url: str) -> Any:
        return self.call("goto", url=url)

    def click(self, selector: str, timeout: Optional[float] = None) -> None:
        self.call("click", selector=selector, timeout=timeout)

    def fill(self, selector: str, value: str) -> None:
        self.call("fill", selector=selector, value=value)

    def select(self, selector: str, value: str) -> None:
        self.call("select", selector=selector, value=value)

    def wait(self, selector: str, timeout: Optional[float] = None, state: str = "visible") -> None:
        self.call("wait", selector=selector, state=state, timeout=timeout)

    def wait_js(self, body: str, arg: Any = None, timeout: Optional[float] = None) -> Any:
        """Wait until ``body`` (a function body with ``arg``) returns a truthy value."""
        return self.call("waitFn", body=body, arg=arg, timeout=timeout)

    def js(self, body: str, arg: Any = None) -> Any:
        return self.call("eval", body=body, arg=arg)

    def count(self, selector: str) -> int:
        return self.call("count", selector=selector)

    def texts(self, selector: str) -> list:
        return self.call("texts", selector=selector)

    def screenshot(self, path: Path, full_page: bool = False) -> Path:
        self.call("screenshot", path=str(path), fullPage=full_page)
        return path

    def errors(self) -> list:
        return self.call("errors")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
