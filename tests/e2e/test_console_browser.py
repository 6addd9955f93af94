"""The operator console in a real browser (Debian's chromium, headless, driven by Selenium): log in with a key,
find a simulated device, read a value, watch a notification arrive, screenshot (issue 17 §5, §7)."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from support.service import ServiceProcess

pytestmark = pytest.mark.e2e

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    # CI installs both from Debian (.ci/run, scripts/test.sh): a missing one is a failure, not a skip
    assert CHROMIUM and CHROMEDRIVER, "install Debian's chromium and chromium-driver (scripts/test.sh does)"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def fleet(service: ServiceProcess) -> Iterator[subprocess.Popen[bytes]]:
    args = ["simulate", "--server", service.coap_uri, "--count", "2", "--prefix", "web-", "--rate", "5"]
    process = subprocess.Popen(
        [sys.executable, "-m", "devicehub", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield process
    finally:
        process.terminate()
        process.wait(timeout=20)


def test_console_logs_in_finds_a_device_reads_and_watches_a_notification(
    service: ServiceProcess, fleet: subprocess.Popen[bytes], browser: WebDriver, tmp_path: Path
) -> None:
    # the console re-renders its tables as events arrive: an element found a moment ago may be replaced, so
    # every look goes through a wait that tries again on a stale element
    wait = WebDriverWait(browser, 20, ignored_exceptions=(StaleElementReferenceException,))
    browser.get(f"{service.base_url}/#key={service.api_key}")

    # the key left the URL at once and lives in this tab's session storage
    wait.until(lambda b: "key=" not in b.current_url)
    assert browser.execute_script("return sessionStorage.getItem('devicehub-key')") == service.api_key
    wait.until(lambda b: b.find_element(By.ID, "live-state").text == "live")

    def device_rows(b: WebDriver) -> list[str]:
        b.find_element(By.ID, "refresh-devices").click()
        return [e.text for e in b.find_elements(By.CSS_SELECTOR, "#device-table td.endpoint-name")]

    wait.until(lambda b: {"web-0", "web-1"} <= set(device_rows(b)))
    browser.find_element(By.ID, "device-search").send_keys("web-1")
    wait.until(
        lambda b: [e.text for e in b.find_elements(By.CSS_SELECTOR, "#device-table td.endpoint-name")] == ["web-1"]
    )
    wait.until(lambda b: b.find_element(By.CSS_SELECTOR, "#device-table tr.clickable").click() or True)

    temperature = "#resource-table tr[data-path='/3303/0/5700']"
    wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, temperature))
    wait.until(lambda b: b.find_element(By.ID, "device-title").text == "web-1")

    # read: a device request through the API; its async-response arrives on the WebSocket channel
    wait.until(lambda b: b.find_element(By.CSS_SELECTOR, f"{temperature} button[data-action='read']").click() or True)
    answered = wait.until(lambda b: [e.text for e in b.find_elements(By.CSS_SELECTOR, "#request-log li.answered")])
    assert "read /3303/0/5700: sent" in answered[0] and "→ 200" in answered[0]
    read_value = wait.until(lambda b: b.find_element(By.CSS_SELECTOR, f"{temperature} td.reported").text)
    assert float(read_value) > -50
    read_at = wait.until(lambda b: b.find_element(By.CSS_SELECTOR, f"{temperature} td.reported-at").text)

    # observe: a subscription; the next notification updates the row
    wait.until(
        lambda b: b.find_element(By.CSS_SELECTOR, f"{temperature} button[data-action='observe']").click() or True
    )
    wait.until(
        lambda b: any("observe /3303/0/5700: 20" in e.text for e in b.find_elements(By.CSS_SELECTOR, "#request-log li"))
    )
    wait.until(lambda b: b.find_element(By.CSS_SELECTOR, f"{temperature} td.reported-at").text != read_at)

    shot = tmp_path / "console.png"
    assert browser.save_screenshot(str(shot))
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == tuple(browser.execute_script("return [window.innerWidth, window.innerHeight]"))
    for element in ("device-title", "resource-table", "request-log", "live-state", "nav-devices", "nav-channel"):
        assert wait.until(lambda b, element=element: b.find_element(By.ID, element).is_displayed())

    # the channel page shows the key's WebSocket channel with its queue
    browser.find_element(By.ID, "nav-channel").click()
    wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#channel-table tr[data-field='queue_size']"))
    wait.until(
        lambda b: b.find_element(By.CSS_SELECTOR, "#channel-table tr[data-field='status']").text.endswith("connected")
    )


def test_docs_renders_every_operation_of_the_openapi_document(service: ServiceProcess, browser: WebDriver) -> None:
    with urllib.request.urlopen(f"{service.base_url}/openapi.json", timeout=10) as response:
        spec = json.load(response)
    methods = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}
    expected = [(m.upper(), path) for path, item in spec["paths"].items() for m in item if m in methods]
    browser.get(f"{service.base_url}/docs")
    wait = WebDriverWait(browser, 20, ignored_exceptions=(StaleElementReferenceException,))
    wait.until(lambda b: b.find_element(By.ID, "operations").get_attribute("data-operations") == str(len(expected)))
    headings = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "section.operation h3")]
    assert headings == [f"{m} {p}" for m, p in expected]
    # parameters, request bodies and responses of the document are on the page
    text = browser.find_element(By.ID, "operations").text
    for item in spec["paths"].values():
        for method, op in item.items():
            if method not in methods:
                continue
            for parameter in op.get("parameters", []):
                if "name" in parameter:
                    assert parameter["name"] in text
            for status in op.get("responses", {}):
                assert status in text
    assert len(browser.find_elements(By.CSS_SELECTOR, "details.component")) == len(spec["components"]["schemas"])
    assert not browser.find_elements(By.CSS_SELECTOR, "script[src^='http']")  # nothing from elsewhere
