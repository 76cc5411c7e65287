#!/usr/bin/env python3
"""Browser check of tollgate's admin status page (src/admin/page/index.html).

Usage:
    python3 tests/browser/status_page.py ADMIN_URL DATA_URL SCREENSHOT_DIR

    ADMIN_URL       admin listener, e.g. http://127.0.0.1:9901
    DATA_URL        a data-plane URL of a rate-limited route, e.g. http://127.0.0.1:8080/v1/search
    SCREENSHOT_DIR  where status-page.png and playground.png are written (created if missing)

Drives Debian's headless Chromium through Debian's chromedriver with Selenium; needs
`apt-get install -y chromium chromium-driver` and `pip install selenium`. Exits 0 when every
check passes, 1 with a message on the first failed check (or if the browser cannot be
started), 2 on bad usage. The browser is always quit. Every wait is bounded.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import TimeoutException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")

PAGE_READY_TIMEOUT = 20.0   # page loaded, policies table filled, live indicator showing data
STATS_TIMEOUT = 15.0        # page reflects the traffic this script sent
PLAYGROUND_TIMEOUT = 5.0    # playground log has all entries
REQUESTS = 30               # requests sent to DATA_URL
REQUEST_TIMEOUT = 5.0       # per data-plane request


class CheckFailed(Exception):
    """A check did not hold; the message says which and what was seen."""


def check(cond: bool, message: str) -> None:
    if not cond:
        raise CheckFailed(message)


def wait_for(driver, timeout: float, what: str, fn):
    """Polls fn(driver) until it returns something truthy; fails with `what` and the last value."""
    last = {"value": None}

    def probe(d):
        last["value"] = fn(d)
        return last["value"]

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.2).until(probe)
    except TimeoutException:
        raise CheckFailed(f"timed out after {timeout:g} s waiting for {what}; last seen: {last['value']!r}") from None


# The top-keys table's row for this script's address in the `client` policy, if refused.
TOP_JS = r"""
for (const tr of document.querySelectorAll("#top-body tr")) {
  const td = [...tr.querySelectorAll("td")].map((c) => c.textContent.trim());
  if (td.length === 6 && td[0] === "client" && td[1] === "127.0.0.1"
      && Number(td[2].replace(/,/g, "")) > 0) return td.join(" | ");
}
return null;
"""

# One JS snapshot of everything the checks read, so no element reference can go stale
# between reads (the page rebuilds its tables with replaceChildren on every poll).
STATE_JS = r"""
const $ = (id) => document.getElementById(id);
const num = (id) => { const t = ($(id)?.textContent || "").replace(/,/g, "").trim();
                      return /^-?\d+$/.test(t) ? Number(t) : null; };
const policies = [...document.querySelectorAll("#policies-body tr")].map((tr) => {
  const td = tr.querySelectorAll("td");
  if (td.length < 8) return null;
  return { name: td[0].querySelector("b")?.textContent ?? "",
           burst: Number(td[3].textContent.replace(/,/g, "")),
           t_ns: Number((td[4].title || "").replace(/ ns$/, "")),
           limit: td[2].textContent.trim(),
           inflight: td[2].textContent.includes("in flight"),
           quota: td[2].textContent.includes(" per ") && td[2].textContent.includes("resets") };
}).filter(Boolean);
const canvas = $("rate-chart");
return {
  policies,
  policiesEmpty: !!document.querySelector("#policies-body td.empty"),
  liveClass: $("live-dot").className,
  liveText: $("live-text").textContent,
  banner: $("banner").classList.contains("show"),
  statsRows: document.querySelectorAll("#stats-body tr").length,
  statsEmpty: !!document.querySelector("#stats-body td.empty"),
  admitted: num("total-admitted"),
  denied: num("total-denied"),
  points: Number(canvas.dataset.points),
  canvasW: canvas.width, canvasH: canvas.height,
  options: [...$("pg-policy").options].map((o) => ({ value: o.value, text: o.textContent })),
  pgValue: $("pg-policy").value,
  pgInfo: $("pg-info").textContent,
  remaining: $("pg-remaining").textContent,
  wait: $("pg-wait").textContent,
  log: [...$("pg-log").children].map((li) => ({ id: li.id, cls: li.className, text: li.textContent })),
};
"""

# Counts pixels that are clearly neither background nor grid grey: the chart's green/red series.
CHART_INK_JS = r"""
const c = document.getElementById("rate-chart");
const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
let green = 0, red = 0;
for (let i = 0; i < d.length; i += 4) {
  const [r, g, b, a] = [d[i], d[i + 1], d[i + 2], d[i + 3]];
  if (a < 128) continue;
  if (g > r + 40 && g > b + 20) green++;
  else if (r > g + 60 && r > b + 60) red++;
}
return { green, red };
"""


def state(driver) -> dict:
    return driver.execute_script(STATE_JS)


def make_driver(profile_dir: str) -> webdriver.Chrome:
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile_dir}", "--window-size=1400,1600",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(20)
    driver.set_script_timeout(10)
    return driver


def send_traffic(url: str, n: int) -> dict:
    """n sequential GETs; 2xx counts as admitted, 429 as denied, anything else fails."""
    counts = {"admitted": 0, "denied": 0}
    for i in range(n):
        try:
            with urllib.request.urlopen(url, timeout=REQUEST_TIMEOUT) as resp:
                resp.read()
                check(200 <= resp.status < 300, f"request {i + 1} to {url}: unexpected status {resp.status}")
                counts["admitted"] += 1
        except urllib.error.HTTPError as e:
            e.read()
            check(e.code == 429, f"request {i + 1} to {url}: unexpected status {e.code} (only 2xx and 429 expected)")
            counts["denied"] += 1
        except (urllib.error.URLError, OSError) as e:
            raise CheckFailed(f"request {i + 1} to {url} failed: {e}") from None
    return counts


def run(admin_url: str, data_url: str, shots: str, driver) -> list[str]:
    summary = []

    # 1. Page loads, policies table is filled and the live indicator shows data.
    driver.get(admin_url.rstrip("/") + "/")
    check("tollgate" in driver.title, f"unexpected page title {driver.title!r} at {admin_url}/ - is ADMIN_URL tollgate's admin listener?")
    s = wait_for(driver, PAGE_READY_TIMEOUT,
                 "policies and stats tables filled, live indicator 'live · updated …' and 2 chart points",
                 lambda d: (lambda s: s if (s["policies"] and not s["policiesEmpty"]
                                            and s["liveClass"] == "ok" and s["liveText"].startswith("live")
                                            and s["statsRows"] > 0 and not s["statsEmpty"]
                                            and s["points"] >= 2) else None)(state(d)))
    check(not s["banner"], "the 'admin API unreachable' banner is shown although the API answered")
    rate = [p for p in s["policies"] if not p["inflight"] and not p["quota"]]
    caps = [p for p in s["policies"] if p["inflight"]]
    quotas = [p for p in s["policies"] if p["quota"]]
    for p in quotas:
        check(re.search(r"per (day|week|month)", p["limit"]) and re.search(r"resets \d{4}-\d\d-\d\dT", p["limit"]),
              f"quota policy row does not show its window and reset time: {p}")
        check(all(o["value"] != p["name"] for o in s["options"]),
              f"quota policy {p['name']!r} is offered in the GCRA playground: {s['options']}")
    summary.append(f"quota policies shown: {', '.join(p['name'] + ' ' + p['limit'] for p in quotas) or 'none'}")
    for p in rate:
        check(p["name"] and p["burst"] >= 1 and p["t_ns"] > 0, f"policies table row looks wrong: {p}")
    for p in caps:
        check(p["name"] and p["limit"].split()[0].replace(",", "").isdigit(),
              f"concurrency policy row looks wrong: {p}")
        check(all(o["value"] != p["name"] for o in s["options"]),
              f"concurrency policy {p['name']!r} is offered in the GCRA playground: {s['options']}")
    summary.append(f"concurrency policies shown: {', '.join(p['name'] + ' ' + p['limit'] for p in caps) or 'none'}")
    summary.append(f"page ready: {len(s['policies'])} policies "
                   f"({', '.join(p['name'] + ' burst ' + str(p['burst']) for p in s['policies'])}), "
                   f"live text {s['liveText']!r}")

    # 2. Real traffic moves the totals and the chart.
    before = s
    check(before["admitted"] is not None and before["denied"] is not None,
          f"#total-admitted / #total-denied are not integers: {before['admitted']!r} / {before['denied']!r}")
    sent = send_traffic(data_url, REQUESTS)
    check(sent["admitted"] > 0, f"none of {REQUESTS} requests to {data_url} was admitted: {sent}")
    check(sent["denied"] > 0,
          f"none of {REQUESTS} requests to {data_url} got 429 - is the route limited with a small burst? {sent}")
    after = wait_for(
        driver, STATS_TIMEOUT,
        f"#total-admitted > {before['admitted']}, #total-denied > {before['denied']} "
        f"and data-points > {before['points']}",
        lambda d: (lambda s: s if (s["admitted"] is not None and s["admitted"] > before["admitted"]
                                   and s["denied"] is not None and s["denied"] > before["denied"]
                                   and s["points"] > before["points"]) else None)(state(d)))
    check(after["admitted"] > before["admitted"], "#total-admitted did not increase")
    check(after["denied"] > before["denied"], "#total-denied did not increase")
    check(after["points"] > before["points"], "canvas data-points did not increase")
    ink = driver.execute_script(CHART_INK_JS)
    check(ink["green"] > 0, f"no admitted (green) line pixels on the chart canvas: {ink}")
    summary.append(
        f"traffic: sent {REQUESTS} -> {sent['admitted']} admitted, {sent['denied']} x 429; page totals "
        f"admitted {before['admitted']} -> {after['admitted']} (+{after['admitted'] - before['admitted']}), "
        f"denied {before['denied']} -> {after['denied']} (+{after['denied'] - before['denied']}), "
        f"data-points {before['points']} -> {after['points']}; chart pixels {ink}")
    if (after["admitted"] - before["admitted"], after["denied"] - before["denied"]) != (sent["admitted"], sent["denied"]):
        summary.append("  note: page deltas differ from this script's own counts (other traffic, a skipped "
                       "first tier, or a request denied by several tiers - see the page's rates rule)")
    # Cosmetic, not a check: two more polls so the screenshot shows the spike as lines, not dots.
    try:
        WebDriverWait(driver, 5, poll_frequency=0.2).until(lambda d: state(d)["points"] >= after["points"] + 2)
    except TimeoutException:
        pass
    driver.execute_script("window.scrollTo(0, 0)")
    path = os.path.join(shots, "status-page.png")
    check(driver.save_screenshot(path), f"could not write {path}")
    summary.append(f"screenshot {path}")

    # 2b. Who is limited: the top-keys table names this script's address under `client`,
    # refused, with its current state.
    top_row = wait_for(driver, STATS_TIMEOUT, "a #top-body row: policy client, key 127.0.0.1, refused > 0",
                       lambda d: d.execute_script(TOP_JS))
    summary.append(f"who is limited: {top_row}")

    # 3. Playground: the smallest-burst policy admits exactly `burst` requests at once, then denies.
    s = state(driver)
    # Smallest burst; among equals the longest emission interval (slowest refill, least timing-sensitive).
    pick = min((p for p in s["policies"] if not p["inflight"]), key=lambda p: (p["burst"], -p["t_ns"]))
    burst, t_ns = pick["burst"], pick["t_ns"]
    check(any(o["value"] == pick["name"] for o in s["options"]),
          f"policy {pick['name']!r} from the table is not an option of #pg-policy: {s['options']}")
    Select(driver.find_element(By.ID, "pg-policy")).select_by_value(pick["name"])
    wait_for(driver, PLAYGROUND_TIMEOUT, f"#pg-policy = {pick['name']!r} and #pg-info mentioning 'burst {burst}'",
             lambda d: (lambda s: s["pgValue"] == pick["name"] and f"burst {burst} " in s["pgInfo"])(state(d)))
    cost = driver.find_element(By.ID, "pg-cost")
    cost.clear()
    cost.send_keys("1")
    driver.find_element(By.ID, "pg-reset").click()
    s = wait_for(driver, PLAYGROUND_TIMEOUT, f"an empty #pg-log and #pg-remaining = {burst} after Reset",
                 lambda d: (lambda s: s if not s["log"] and s["remaining"] == str(burst) else None)(state(d)))

    fire = driver.find_element(By.ID, "pg-fire")
    chain = ActionChains(driver, duration=0)
    for _ in range(burst + 1):
        chain.click(fire)
    t0 = time.monotonic()
    chain.perform()  # one WebDriver command: the clicks land milliseconds apart
    s = wait_for(driver, PLAYGROUND_TIMEOUT, f"{burst + 1} entries in #pg-log",
                 lambda d: (lambda s: s if len(s["log"]) >= burst + 1 else None)(state(d)))
    elapsed = time.monotonic() - t0
    check(len(s["log"]) == burst + 1, f"expected {burst + 1} #pg-log entries, found {len(s['log'])}: {s['log']}")
    # The page prepends (newest first); order by the request number in the id (pg-req-N).
    try:
        entries = sorted(s["log"], key=lambda e: int(e["id"].rsplit("-", 1)[1]))
    except (ValueError, IndexError):
        raise CheckFailed(f"#pg-log entries lack pg-req-N ids: {s['log']}") from None
    texts = [e["text"] for e in entries]
    timing = (f" (the {burst + 1} clicks took {elapsed * 1000:.0f} ms; emission interval "
              f"T = {t_ns / 1e6:g} ms, so a slower run would let the bucket refill)")
    for i, e in enumerate(entries[:burst]):
        check(e["text"].startswith("admitted"),
              f"playground request {i + 1} of {burst + 1} ({pick['name']}, burst {burst}) should be admitted: "
              f"{e['text']!r}; log in order: {texts}" + timing)
    check(entries[-1]["text"].startswith("denied"),
          f"playground request {burst + 1} ({pick['name']}, burst {burst}) should be denied: "
          f"{entries[-1]['text']!r}; log in order: {texts}" + timing)
    if elapsed * 1e9 < t_ns:  # readouts are only deterministic before one interval has passed
        check(s["remaining"] == "0", f"#pg-remaining should be 0 right after the denial, is {s['remaining']!r}")
        check(s["wait"].isdigit() and int(s["wait"]) > 0,
              f"#pg-wait should be > 0 ms right after the denial, is {s['wait']!r}")
    summary.append(f"playground: policy {pick['name']!r} (burst {burst}, T {t_ns / 1e6:g} ms): "
                   f"{burst} admitted then denied; remaining {s['remaining']}, wait {s['wait']} ms")
    summary.append(f"  last entry: {entries[-1]['text']}")
    section = driver.find_element(By.ID, "pg-log").find_element(By.XPATH, "./ancestor::section")
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", section)
    path = os.path.join(shots, "playground.png")
    check(driver.save_screenshot(path), f"could not write {path}")
    summary.append(f"screenshot {path}")

    # Page-side JavaScript errors would not fail a visible check but are worth failing on.
    try:
        logs = driver.get_log("browser")
    except WebDriverException:
        logs = []
    errors = [l["message"] for l in logs if l.get("level") == "SEVERE" and "favicon.ico" not in l.get("message", "")]
    check(not errors, f"browser console errors: {errors}")
    return summary


def with_browser(check_page):
    """Runs check_page(driver) in a fresh headless Chromium and returns (exit code, what it
    returned): 0 when it passed, 1 (with the message on stderr) when a check failed or the
    browser broke. The browser is always quit and its profile removed."""
    profile = tempfile.mkdtemp(prefix="tollgate-chromium-")
    driver = None
    try:
        driver = make_driver(profile)
        return 0, check_page(driver)
    except CheckFailed as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1, None
    except WebDriverException as e:
        print(f"FAIL: browser error: {e.msg or e}", file=sys.stderr)
        return 1, None
    finally:
        if driver is not None:
            try:
                driver.quit()
            except Exception as e:  # noqa: BLE001 - report, but the verdict stands
                print(f"warning: quitting the browser failed: {e}", file=sys.stderr)
        shutil.rmtree(profile, ignore_errors=True)


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    admin_url, data_url, shots = argv[1], argv[2], argv[3]
    os.makedirs(shots, exist_ok=True)
    code, summary = with_browser(lambda driver: run(admin_url, data_url, shots, driver))
    if code:
        return code
    print("status page OK")
    for line in summary:
        print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
