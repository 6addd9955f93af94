"""The operator console in a real browser (Debian's chromium, headless, driven by Selenium) against a real
`devicehub serve` and simulated devices (issue 17 §5, §7; issue 32 #1, #2): the object tree with names, units,
live values and only each resource's operations; a typed write; observe and cancel; the plot; the server-paged
device list of 1 300 devices; the node view, with the oldest event of each channel of the account; a login that
never touches the key's channel; the polish list; the channel view's state, dead letters, redrive and the removal
a 410 caused (issue 34 #3); the campaign view's list, device states, start and stop (issue 33).

Screenshots go to `artifacts/console/` at the repository root (ignored by git), or `$DEVICEHUB_ARTIFACTS/console/`:
CI keeps that directory as the run's artefacts.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import struct
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from support.firmware_api import IMAGE, MANIFEST, upload
from support.service import ServiceProcess
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
ARTIFACTS = Path(os.environ.get("DEVICEHUB_ARTIFACTS", Path(__file__).resolve().parents[2] / "artifacts")) / "console"
TEMPERATURE = "#resources tr[data-path='/3303/0/5700']"
DIMMER = "#resources tr[data-path='/3311/0/5851']"
REBOOT = "#resources tr[data-path='/3/0/4']"


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    # CI installs both from Debian (.ci/run, scripts/test.sh): a missing one is a failure, not a skip
    assert CHROMIUM and CHROMEDRIVER, "install Debian's chromium and chromium-driver (scripts/test.sh does)"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def simulate(service: ServiceProcess, count: int, *options: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "devicehub", "simulate", "--server", service.coap_uri, "--count", str(count), *options],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    process.wait(timeout=30)


@pytest.fixture
def fleet(service: ServiceProcess) -> Iterator[subprocess.Popen[bytes]]:
    process = simulate(service, 2, "--prefix", "web-", "--rate", "5", "--flavor", "oma")
    try:
        yield process
    finally:
        stop(process)


def get(service: ServiceProcess, path: str) -> tuple[int, Any]:
    request = urllib.request.Request(service.base_url + path, headers={"Authorization": f"Bearer {service.api_key}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
            return response.status, json.loads(body) if body else None
    except urllib.error.HTTPError as error:
        return error.code, None


def screenshot(browser: WebDriver, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / f"{name}.png"
    assert browser.save_screenshot(str(shot))
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == tuple(browser.execute_script("return [window.innerWidth, window.innerHeight]"))
    return shot


def centre(browser: WebDriver, selector: str) -> None:
    """Scroll a row to the middle of the window before a screenshot."""
    row = browser.find_element(By.CSS_SELECTOR, selector)
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", row)


def page_errors(browser: WebDriver) -> list[str]:
    """Errors the page raised (uncaught exceptions, rejected promises); a refused request's own log line is the
    network's, not the page's."""
    return [
        entry["message"]
        for entry in browser.get_log("browser")
        if entry["level"] == "SEVERE" and "Failed to load resource" not in entry["message"]
    ]


def actions(browser: WebDriver, row: str) -> set[str]:
    return {
        b.get_attribute("data-action") or "" for b in browser.find_elements(By.CSS_SELECTOR, f"{row} td.actions button")
    }


def test_the_device_page_is_an_object_tree_with_typed_operations_live_values_and_a_plot(
    service: ServiceProcess, fleet: subprocess.Popen[bytes], browser: WebDriver
) -> None:
    # the console re-renders as events arrive: an element found a moment ago may be replaced, so every look goes
    # through a wait that tries again on a stale element
    wait = WebDriverWait(browser, 30, ignored_exceptions=(StaleElementReferenceException,))
    browser.get(f"{service.base_url}/#key={service.api_key}")

    # the key left the URL at once and lives in this tab's session storage; the live feed is open
    wait.until(lambda b: "key=" not in b.current_url)
    assert browser.execute_script("return sessionStorage.getItem('devicehub-key')") == service.api_key
    wait.until(lambda b: b.find_element(By.ID, "live-state").text == "live")

    def names(b: WebDriver) -> list[str]:
        return [e.text for e in b.find_elements(By.CSS_SELECTOR, "#device-table td.endpoint-name")]

    def refreshed(b: WebDriver) -> list[str]:
        b.find_element(By.ID, "refresh-devices").click()
        return names(b)

    wait.until(lambda b: {"web-0", "web-1"} <= set(refreshed(b)))
    browser.find_element(By.ID, "device-search").send_keys("web-1")
    browser.find_element(By.ID, "refresh-devices").click()
    wait.until(lambda b: names(b) == ["web-1"])
    wait.until(lambda b: b.find_element(By.CSS_SELECTOR, "#device-table td.last-contact").text.endswith("Z"))
    wait.until(lambda b: b.find_element(By.CSS_SELECTOR, "#device-table tr.clickable").click() or True)

    # the tree: objects by name, resources by name with units, and only the operations each one has
    wait.until(lambda b: b.find_element(By.ID, "device-title").text == "web-1")
    wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, TEMPERATURE))
    summary = browser.find_element(By.CSS_SELECTOR, "details.object[data-object='3303'] summary").text
    assert summary.startswith("Temperature")
    assert "Sensor Value" in browser.find_element(By.CSS_SELECTOR, f"{TEMPERATURE} td.name").text
    assert actions(browser, TEMPERATURE) == {"read", "observe"}  # R: neither write nor execute
    assert actions(browser, REBOOT) == {"execute"}
    assert actions(browser, DIMMER) == {"read", "write", "observe"}
    assert browser.find_element(By.CSS_SELECTOR, f"{DIMMER} .units").text == "/100"

    # read: the answer arrives on the console's feed and shows at the top of the page, in view
    wait.until(lambda b: b.find_element(By.CSS_SELECTOR, f"{TEMPERATURE} button[data-action='read']").click() or True)
    wait.until(lambda b: "read /3303/0/5700: 200" in b.find_element(By.ID, "result").text)
    assert browser.execute_script(
        "const r = document.getElementById('result').getBoundingClientRect();"
        " return r.top >= 0 && r.bottom <= innerHeight"
    )
    read_value = wait.until(lambda b: b.find_element(By.CSS_SELECTOR, f"{TEMPERATURE} .reported").text)
    assert float(read_value) > -50

    # observe: notifications update the row and draw its plot; the button becomes "cancel observe"
    browser.find_element(By.CSS_SELECTOR, f"{TEMPERATURE} button[data-action='observe']").click()
    wait.until(lambda b: actions(b, TEMPERATURE) == {"read", "cancel-observe"})
    points = wait.until(
        lambda b: (
            int(b.find_element(By.CSS_SELECTOR, f"{TEMPERATURE} svg.spark").get_attribute("data-points") or 0) >= 3
        )
    )
    assert points
    centre(browser, TEMPERATURE)
    screenshot(browser, "device-tree-observed")
    browser.find_element(By.CSS_SELECTOR, f"{TEMPERATURE} button[data-action='cancel-observe']").click()
    wait.until(lambda b: actions(b, TEMPERATURE) == {"read", "observe"})
    assert any(
        "cancel observe /3303/0/5700: 204" in e.text for e in browser.find_elements(By.CSS_SELECTOR, "#request-log li")
    )

    # a typed write: the Dimmer is an Integer, so the form is a whole-number field; its status is a word
    browser.find_element(By.CSS_SELECTOR, f"{DIMMER} button[data-action='write']").click()
    field = wait.until(lambda b: b.find_element(By.CSS_SELECTOR, "tr.write-form input.write-value"))
    assert (field.get_attribute("type"), field.get_attribute("step")) == ("number", "1")
    field.send_keys("42")
    browser.find_element(By.CSS_SELECTOR, "tr.write-form button[type='submit']").click()
    wait.until(lambda b: "write /3311/0/5851: 200" in b.find_element(By.ID, "result").text)
    wait.until(lambda b: b.find_element(By.CSS_SELECTOR, f"{DIMMER} td.desired-status").text == "42 — written")
    centre(browser, DIMMER)
    screenshot(browser, "device-typed-write")

    # the node view: /metrics for a person
    browser.find_element(By.ID, "nav-node").click()
    registered = wait.until(lambda b: b.find_element(By.CSS_SELECTOR, "[data-figure='registered'] .value").text)
    assert int(float(registered)) == 2
    wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#rate-plot svg polyline"))
    screenshot(browser, "node")

    # the key's channel was never created: the console has its own feed
    assert get(service, "/v2/notification/channel")[0] == 404
    browser.find_element(By.ID, "nav-channel").click()
    wait.until(lambda b: b.find_element(By.CSS_SELECTOR, "#channel-table td.none").text == "no channel")
    assert page_errors(browser) == []


def test_the_device_list_pages_filters_and_sorts_1300_devices_on_the_server(
    service: ServiceProcess, browser: WebDriver
) -> None:
    fleet = simulate(service, 1300, "--prefix", "fleet-", "--rate", "0.01", "--register-rate", "1000")
    try:
        wait_until(
            lambda: (get(service, "/v3/devices?limit=2&include=total_count")[1] or {}).get("total_count") == 1300,
            within=90,
            what="1300 devices in the directory",
        )
    finally:
        stop(fleet)
    wait = WebDriverWait(browser, 30, ignored_exceptions=(StaleElementReferenceException,))
    browser.get(f"{service.base_url}/#key={service.api_key}")
    wait.until(lambda b: b.find_element(By.ID, "device-count").text == "1–50 of 1300")
    browser.find_element(By.ID, "page-next").click()
    wait.until(lambda b: b.find_element(By.ID, "device-count").text == "51–100 of 1300")
    screenshot(browser, "devices-page-2")

    # a device beyond the first thousand is found by the server's filter
    browser.find_element(By.ID, "device-search").send_keys("fleet-1299")
    browser.find_element(By.ID, "refresh-devices").click()
    wait.until(
        lambda b: [e.text for e in b.find_elements(By.CSS_SELECTOR, "#device-table td.endpoint-name")] == ["fleet-1299"]
    )
    browser.find_element(By.ID, "device-search").clear()

    # newest contact first, by the server
    browser.execute_script("document.getElementById('device-sort').value = 'last_contact_at:DESC'")
    browser.find_element(By.ID, "refresh-devices").click()
    wait.until(lambda b: b.find_element(By.ID, "device-count").text == "1–50 of 1300")

    def contacts(b: WebDriver) -> list[str]:
        return [e.text for e in b.find_elements(By.CSS_SELECTOR, "#device-table td.last-contact")]

    shown = wait.until(lambda b: len(contacts(b)) == 50 and contacts(b))
    assert shown == sorted(shown, reverse=True)
    screenshot(browser, "devices-by-last-contact")
    assert page_errors(browser) == []


def test_the_device_page_shows_the_devices_lifecycle_history(service: ServiceProcess, browser: WebDriver) -> None:
    """issue 32 #3: the device page lists the device's lifecycle events (GET /v3/device-events), newest first."""
    device = simulate(service, 1, "--prefix", "life-", "--rate", "0")
    try:
        found = wait_until(
            lambda: get(service, "/v3/devices?endpoint_name=life-0")[1]["data"], within=20, what="life-0"
        )
        device_id = found[0]["id"]
    finally:
        stop(device)  # a graceful stop de-registers it
    wait_until(
        lambda: get(service, "/v3/devices?endpoint_name=life-0&state=deregistered")[1]["data"], within=20, what="gone"
    )
    wait = WebDriverWait(browser, 30, ignored_exceptions=(StaleElementReferenceException,))
    browser.get(f"{service.base_url}/#key={service.api_key}")
    wait.until(lambda b: "key=" not in b.current_url)
    browser.get(f"{service.base_url}/#device/{device_id}")
    wait.until(lambda b: b.find_element(By.ID, "device-title").text == "life-0")

    def kinds(b: WebDriver) -> list[str]:
        return [
            r.get_attribute("data-event") or "" for r in b.find_elements(By.CSS_SELECTOR, "#device-events tbody tr")
        ]

    wait.until(lambda b: kinds(b) == ["deregistered", "registered"])
    first = browser.find_element(By.CSS_SELECTOR, "#device-events tbody tr")
    assert first.find_element(By.CSS_SELECTOR, "td.event").text == "Device de-registered"
    assert first.find_element(By.CSS_SELECTOR, "td.when").text.endswith("Z")
    centre(browser, "#device-events")
    screenshot(browser, "device-lifecycle")
    assert page_errors(browser) == []


def test_the_login_page_and_a_refused_key_are_clean(service: ServiceProcess, browser: WebDriver) -> None:
    wait = WebDriverWait(browser, 20, ignored_exceptions=(StaleElementReferenceException,))
    browser.get(service.base_url + "/")
    wait.until(lambda b: b.find_element(By.ID, "login-view").is_displayed())
    assert not browser.find_element(By.ID, "nav").is_displayed()
    assert not browser.find_element(By.ID, "logout").is_displayed()
    screenshot(browser, "login")

    # a key the service refuses: back to the login page with the reason, and no uncaught error
    browser.get(f"{service.base_url}/#key=ak_not_a_key")
    wait.until(lambda b: "401" in b.find_element(By.ID, "login-error").text)
    assert not browser.find_element(By.ID, "nav").is_displayed()
    assert page_errors(browser) == []

    with urllib.request.urlopen(service.base_url + "/favicon.ico", timeout=10) as response:
        assert response.status == 200 and response.headers["Content-Type"].startswith("image/svg+xml")


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
    # the index is readable (not white on the light page) and the page has no horizontal scrollbar
    colour = browser.find_element(By.CSS_SELECTOR, "#toc a").value_of_css_property("color")
    assert colour not in ("rgba(255, 255, 255, 1)", "rgb(255, 255, 255)")
    assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
    screenshot(browser, "docs")


class _Gone(http.server.BaseHTTPRequestHandler):
    """A callback receiver that verifies the registration (200 to its empty PUT) and then answers 410 Gone."""

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200 if body == b"{}" else 410)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_the_channel_view_shows_status_dead_letters_a_redrive_and_a_removal(tmp_path: Path, browser: WebDriver) -> None:
    # issue 34 #3: a queue of 4 KiB holds about 15 registrations; 40 devices make the byte cap take the rest
    service = ServiceProcess(
        data_dir=tmp_path / "data", extra_args=("--channel-max-bytes", "4096", "--callback-allow", "127.0.0.0/8")
    ).start()
    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Gone)
    serving = threading.Thread(target=receiver.serve_forever, daemon=True)
    serving.start()
    try:
        assert service.api("PUT", "/v2/notification/websocket")[0] == 201
        process = simulate(service, 40, "--prefix", "dl-")
        try:
            wait_until(
                lambda: (service.api("GET", "/v2/notification/dead-letters")[1] or {}).get("count", 0) > 0,
                within=60,
                what="the byte cap's dead letters",
            )
        finally:
            stop(process)
        wait = WebDriverWait(browser, 30, ignored_exceptions=(StaleElementReferenceException,))
        browser.get(f"{service.base_url}/#key={service.api_key}")
        wait.until(lambda b: b.find_element(By.ID, "live-state").text == "live")

        # issue 32 #2: the node page lists the account's channels with the age of each one's oldest queued event
        browser.find_element(By.ID, "nav-node").click()
        row = "#account-channels tbody tr"
        oldest = wait.until(lambda b: float(b.find_element(By.CSS_SELECTOR, row).get_attribute("data-oldest") or 0))
        status = service.api("GET", "/v2/notification/channel?include=status")[1]["status"]
        assert 0 < oldest <= status["oldest_age_s"]  # read a moment before the API's answer
        cells = [c.text for c in browser.find_elements(By.CSS_SELECTOR, f"{row} td")]
        assert cells[1:3] == ["websocket", "disconnected"] and int(cells[3]) > 0
        assert cells[4].endswith((" s", " min", " h")) and int(cells[5]) > 0  # the byte cap's drops
        screenshot(browser, "node-channels")

        browser.find_element(By.ID, "nav-channel").click()
        state = "#channel-table tr[data-field='state'] td:nth-child(2)"
        wait.until(lambda b: b.find_element(By.CSS_SELECTOR, state).text == "disconnected")
        drops = browser.find_element(By.CSS_SELECTOR, "#channel-table tr[data-field='drops'] td:nth-child(2)").text
        assert json.loads(drops)["byte_cap"] > 0
        rows = wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#dead-table tbody tr"))
        assert len(rows) > 0 and all(r.get_attribute("data-cause") == "byte_cap" for r in rows)
        assert browser.find_element(By.ID, "dead-count").text == f"({len(rows)})"
        screenshot(browser, "channel-dead-letters")

        browser.find_element(By.ID, "redrive").click()
        wait.until(lambda b: b.find_element(By.ID, "redrive-result").text.endswith("queued again"))
        assert int(browser.find_element(By.ID, "redrive-result").text.split()[0]) > 0

        # the key's channel becomes a callback whose receiver answers 410: the feed says it went, the view why
        port = receiver.server_address[1]
        body = {"url": f"http://127.0.0.1:{port}/cb", "delivery": {"remove_on_gone": True}}
        assert service.api("PUT", "/v2/notification/callback", body)[0] == 204
        removed = wait.until(lambda b: b.find_element(By.ID, "channel-removed").text)
        assert "410 Gone" in removed and "callback" in removed and "[gone]" in removed
        wait.until(lambda b: b.find_element(By.CSS_SELECTOR, "#channel-table td.none").text == "no channel")
        screenshot(browser, "channel-removed")
        assert page_errors(browser) == []
    finally:
        receiver.shutdown()
        receiver.server_close()
        service.stop()


def test_the_campaign_view_lists_campaigns_shows_device_states_and_starts_and_stops(
    tmp_path: Path, browser: WebDriver
) -> None:
    # issue 33: three devices that update and one that refuses the update (Update Result 8), from two simulators
    service = ServiceProcess(data_dir=tmp_path / "data", extra_args=("--firmware-check-interval", "0.2")).start()
    common = ("--endpoint-type", "fw-console", "--flavor", "oma", "--rate", "0", "--firmware")
    good = simulate(service, 3, "--prefix", "fw-ok-", *common)
    bad = simulate(service, 1, "--prefix", "fw-bad-", *common, "--firmware-refuse-percent", "100")
    try:
        service.registered_devices(4, within=30)
        upload(service, "/v3/firmware-images", IMAGE.read_bytes())
        manifest = upload(service, "/v3/firmware-manifests", MANIFEST.read_bytes())
        body = {
            "name": "console rollout",
            "device_filter": "endpoint_type=fw-console",
            "root_manifest_id": manifest["id"],
        }
        status, rollout = service.api("POST", "/v3/update-campaigns", body)
        assert status == 201
        # at most one start a minute: this one stays active until the console stops it
        paced = {**body, "name": "paced rollout", "max_starts_per_minute": 1}
        status, slow = service.api("POST", "/v3/update-campaigns", paced)
        assert status == 201

        wait = WebDriverWait(browser, 60, ignored_exceptions=(StaleElementReferenceException,))
        browser.get(f"{service.base_url}/#key={service.api_key}")
        wait.until(lambda b: b.find_element(By.ID, "live-state").text == "live")
        browser.find_element(By.ID, "nav-campaigns").click()
        rows = wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#campaign-table tbody tr[data-campaign-id]"))
        assert {r.get_attribute("data-phase") for r in rows} == {"draft"} and len(rows) == 2
        screenshot(browser, "campaigns-drafts")

        # open the rollout: a draft offers Start only; Start runs it to the end, the feed keeps the view current
        browser.find_element(By.CSS_SELECTOR, f"#campaign-table tr[data-campaign-id='{rollout['id']}']").click()
        wait.until(lambda b: b.find_element(By.ID, "campaign-phase").text == "draft")
        assert browser.find_element(By.ID, "campaign-stop").get_attribute("disabled") is not None
        browser.find_element(By.ID, "campaign-start").click()
        wait.until(lambda b: b.find_element(By.ID, "campaign-result").text == "start: accepted")
        wait.until(lambda b: b.find_element(By.ID, "campaign-phase").text == "stopped")

        def device_states(b: WebDriver) -> dict[str, str]:
            rows = b.find_elements(By.CSS_SELECTOR, "#campaign-devices tbody tr[data-state]")
            return {r.find_element(By.CSS_SELECTOR, "td.name").text: r.get_attribute("data-state") or "" for r in rows}

        states = wait.until(lambda b: device_states(b) if len(device_states(b)) == 4 else None)
        assert states == {
            "fw-ok-0": "deployed",
            "fw-ok-1": "deployed",
            "fw-ok-2": "deployed",
            "fw-bad-0": "failed_connector_channel_update",
        }
        why = browser.find_element(By.CSS_SELECTOR, "#campaign-devices tr.failed td.why").text
        assert "Update Result 8" in why
        figures = {
            f.get_attribute("data-figure"): f.find_element(By.CSS_SELECTOR, ".value").text
            for f in browser.find_elements(By.CSS_SELECTOR, "#campaign-figures .figure")
        }
        assert figures == {"success": "3", "fail": "1", "info": "0", "skipped": "0", "total": "4"}
        assert browser.find_element(By.ID, "campaign-start").get_attribute("disabled") is not None
        screenshot(browser, "campaign-finished")

        # a second Start is refused by the API: the page says so (its button is disabled, so the call is made here)
        assert service.api("POST", f"/v3/update-campaigns/{rollout['id']}/start")[0] == 409

        # the paced campaign: started, one device at a time; Stop skips the ones not started
        browser.get(f"{service.base_url}/#campaign/{slow['id']}")
        wait.until(lambda b: b.find_element(By.ID, "campaign-phase").text == "draft")
        browser.find_element(By.ID, "campaign-start").click()
        wait.until(lambda b: b.find_element(By.ID, "campaign-phase").text == "active")
        wait.until(lambda b: b.find_element(By.ID, "campaign-stop").get_attribute("disabled") is None)
        browser.find_element(By.ID, "campaign-stop").click()
        wait.until(lambda b: b.find_element(By.ID, "campaign-result").text == "stop: accepted")
        wait.until(lambda b: b.find_element(By.ID, "campaign-phase").text == "stopped")
        skipped = wait.until(
            lambda b: (
                b.find_elements(By.CSS_SELECTOR, "#campaign-devices td.why")
                if sum(
                    "the campaign stopped" in c.text
                    for c in b.find_elements(By.CSS_SELECTOR, "#campaign-devices td.why")
                )
                >= 3
                else None
            )
        )
        assert skipped
        screenshot(browser, "campaign-stopped")

        browser.find_element(By.ID, "nav-campaigns").click()
        wait.until(
            lambda b: (
                {
                    r.get_attribute("data-phase")
                    for r in b.find_elements(By.CSS_SELECTOR, "#campaign-table tr[data-campaign-id]")
                }
                == {"stopped"}
            )
        )
        row = browser.find_element(By.CSS_SELECTOR, f"#campaign-table tr[data-campaign-id='{rollout['id']}']")
        assert [row.find_element(By.CSS_SELECTOR, f"td.{c}").text for c in ("success", "failed", "pending")] == [
            "3",
            "1",
            "0",
        ]
        screenshot(browser, "campaigns-list")
        assert page_errors(browser) == []
    finally:
        stop(good)
        stop(bad)
        service.stop()
