#!/usr/bin/env python3
"""Browser check of the status page while the gateway's Redis cannot be reached.

Usage:
    python3 tests/browser/store_down.py ADMIN_URL ADDRESS SECRET SCREENSHOT_DIR

    ADMIN_URL       admin listener, e.g. http://127.0.0.1:9901
    ADDRESS         the Redis address the page must name, e.g. 127.0.0.1:6390
    SECRET          the password in the store URL, which must appear nowhere on the page
    SCREENSHOT_DIR  where store-down.png is written

The page must say the store is unavailable (the banner with the address and the cause
`connection_refused`, the live indicator not green) rather than a green "live", and count
the 503s it caused among the live numbers. Shares the
browser set-up of status_page.py. Exits 0 when every check passes, 1 on the first failed
check, 2 on bad usage.
"""

from __future__ import annotations

import os
import sys

from selenium.webdriver.common.by import By

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from status_page import check, wait_for, with_browser  # noqa: E402

TIMEOUT = 20.0


def run(driver, admin_url: str, address: str, secret: str, shots: str) -> str:
    driver.get(admin_url + "/")
    banner = wait_for(
        driver,
        TIMEOUT,
        "the store banner naming the address and the cause",
        lambda d: (
            (lambda t: t if address in t and "connection_refused" in t else None)(
                d.find_element(By.ID, "store-health").text
            )
        ),
    )
    live = driver.find_element(By.ID, "live-text").text
    check("store unavailable" in live, f"the live indicator says the store is down: {live!r}")
    dot = driver.find_element(By.ID, "live-dot").get_attribute("class")
    check(dot == "err", f"the live dot is not green: {dot!r}")
    store = driver.find_element(By.ID, "store").text
    check(address in store and "open" in store, f"the header names the store and its breaker: {store!r}")
    check(secret not in driver.page_source, "the store's password appears on the page")
    # The 503s the dead store caused are among the live numbers, not missing from them.
    wait_for(
        driver,
        TIMEOUT,
        "the store's 503s among the live numbers (#total-store >= 5)",
        lambda d: (
            (lambda t: t if t.replace(",", "").isdigit() and int(t.replace(",", "")) >= 5 else None)(
                d.find_element(By.ID, "total-store").text
            )
        ),
    )
    driver.save_screenshot(os.path.join(shots, "store-down.png"))
    return banner


def main(argv: list[str]) -> int:
    if len(argv) != 5:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    admin_url, address, secret, shots = argv[1:]
    os.makedirs(shots, exist_ok=True)
    code, banner = with_browser(lambda driver: run(driver, admin_url, address, secret, shots))
    if code:
        return code
    print(f"store-down page OK: {banner}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
