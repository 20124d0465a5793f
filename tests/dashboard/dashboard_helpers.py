"""Helpers of the dashboard tests: a real job with ``--dashboard=0``, and a real headless
browser (Debian's ``chromium`` and ``chromium-driver``, driven by selenium).

Without a browser (a fresh machine) the browser tests skip, saying what is missing; with
``MINIMPI_BROWSER_REQUIRED=1`` (CI, where .ci/run installs it) they fail instead, so a
broken installation cannot pass as skipped.

``MINIMPI_DASHBOARD_SHOTS=DIR`` makes the tests save a screenshot of each case there.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Callable, Optional

import pytest
from jobhelpers import assert_no_leftovers, marker_args

REQUIRED = os.environ.get("MINIMPI_BROWSER_REQUIRED", "") not in ("", "0")
SHOTS = os.environ.get("MINIMPI_DASHBOARD_SHOTS")
BROWSERS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
DRIVERS = ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")
BROWSER_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-dev-shm-usage", "--window-size=1600,1200")
URL_LINE = re.compile(r"minimpi: dashboard at (http://\S+)")


def unavailable(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"a headless browser is needed but {reason} (MINIMPI_BROWSER_REQUIRED is "
                    f"set: install Debian's chromium and chromium-driver, and selenium)")
    pytest.skip(f"no headless browser: {reason} (apt-get install chromium chromium-driver; "
                f"pip install selenium)")


def browser_paths() -> tuple[str, str]:
    browser = next((p for p in BROWSERS if os.access(p, os.X_OK)), shutil.which("chromium"))
    driver = next((p for p in DRIVERS if os.access(p, os.X_OK)), shutil.which("chromedriver"))
    if browser is None:
        unavailable("chromium is not installed")
    if driver is None:
        unavailable("chromedriver (Debian's chromium-driver) is not installed")
    return browser, driver


def start_browser():
    """A headless Chromium through selenium (a fresh profile; nothing downloaded)."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        unavailable("selenium is not installed (it is in the test extra)")
    browser, driver = browser_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in BROWSER_FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="minimpi-dashboard-browser-")
    options.add_argument(f"--user-data-dir={profile}")
    try:
        # an explicit driver path: selenium never looks for (or fetches) one itself
        d = webdriver.Chrome(service=Service(driver), options=options)
    except Exception as exc:   # the browser cannot start here
        shutil.rmtree(profile, ignore_errors=True)
        unavailable(f"chromium did not start: {type(exc).__name__}: {str(exc)[:300]}")
    d.set_page_load_timeout(30)
    d.minimpi_profile = profile
    return d


def stop_browser(d) -> None:
    try:
        d.quit()
    finally:
        shutil.rmtree(getattr(d, "minimpi_profile", ""), ignore_errors=True)


def wait_for(what: str, check: Callable[[], object], timeout: float, every: float = 0.2,
             describe: Optional[Callable[[], str]] = None):
    """``check()``'s first true value within ``timeout`` seconds; else the test fails,
    naming ``what`` (and ``describe()``: what there was instead)."""
    deadline = time.monotonic() + timeout
    last_error = None
    while True:
        try:
            value = check()
            if value:
                return value
        except Exception as exc:   # the page is being redrawn: look again
            last_error = exc
        if time.monotonic() >= deadline:
            seen = describe() if describe is not None else ""
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}"
                        + (f"; last error: {last_error!r}" if last_error else "")
                        + (f"\n{seen}" if seen else ""))
        time.sleep(every)


def screenshot(driver, name: str) -> None:
    """The whole page, as tall as it is (at most 3200 px), into MINIMPI_DASHBOARD_SHOTS."""
    if not SHOTS:
        return
    os.makedirs(SHOTS, exist_ok=True)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1600, min(max(int(height) + 160, 900), 3200))
    time.sleep(0.5)         # the page redraws for its new size
    driver.save_screenshot(os.path.join(SHOTS, name))
    driver.set_window_size(1600, 1200)


class DashboardJob:
    """``minimpi run --dashboard=0 ARGS...``: its output goes to files, its URL is read from
    the launcher's stderr; the whole process group is killed at the end, whatever happened,
    and the job's marker checked for leftovers."""

    def __init__(self, tmp_path, marker: str, *args: str, env: Optional[dict] = None,
                 command: str = "run") -> None:
        self.out_path = tmp_path / f"{command}.stdout"
        self.err_path = tmp_path / f"{command}.stderr"
        self.marker = marker
        full_env = {**os.environ, **(env or {})}
        full_env.pop("MINIMPI_DASHBOARD", None)
        extra = ["--dashboard=0", *marker_args(marker)] if command == "run" else []
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "minimpi", command, *extra, *map(str, args)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=full_env,
                start_new_session=True)
        self.url: Optional[str] = None

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    def wait_url(self, timeout: float = 60.0) -> str:
        def found():
            m = URL_LINE.search(self.stderr())
            if m is None and self.proc.poll() is not None:
                pytest.fail(f"minimpi ended ({self.proc.returncode}) without a dashboard URL:"
                            f"\n{self.stderr()}")
            return m.group(1) if m else None
        self.url = wait_for("the dashboard's URL line", found, timeout)
        return self.url

    def base(self) -> str:
        return self.url.split("?", 1)[0]

    def token(self) -> str:
        return self.url.split("token=", 1)[1]

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"minimpi did not end within {timeout:g} s\n--- stderr ---\n"
                        f"{self.stderr()[-4000:]}")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait(timeout=10)
        if self.marker:
            assert_no_leftovers(self.marker)


def http_status(url: str, method: str = "GET") -> int:
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code

