"""Take the README tour's screenshot of a follow-up: docs/follow-up.png.

Like scripts/screenshot.py (whose helpers it uses), it needs no network and no key: a SQLite
database with the starter dataset, daphne with the agent pool and the offline demo model. It
runs a research in Chromium, asks a follow-up under its report, and saves the follow-up's page
with its thread and the report's part that quotes the earlier research's sources.

    .venv/bin/python scripts/screenshot_followup.py [docs/follow-up.png]
"""

import argparse
import re
from pathlib import Path

from playwright.sync_api import expect, sync_playwright
from screenshot import (
    CHROMIUM,
    CHROMIUM_ARGS,
    PROJECT,
    demo_app,
    log_in,
    run_research,
)

FOLLOWUP = "What happens to an exception raised inside a with statement's block?"


def shoot(url: str, password: str, out: Path) -> None:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        log_in(page, url, password)
        run_research(page, url)
        form = page.get_by_role("region", name="Ask a follow-up")
        form.get_by_label("Your follow-up question").fill(FOLLOWUP)
        form.get_by_role("button", name="Ask a follow-up").click()
        page.wait_for_url(re.compile(r"/runs/\d+/$"))
        expect(page.locator("#run-status")).to_have_text("done", timeout=120_000)
        expect(page.locator("#report")).to_contain_text("From the earlier research")
        page.wait_for_timeout(800)
        # The thread above, then the report from its part on the earlier research.
        page.set_viewport_size({"width": 1440, "height": 1560})
        page.evaluate("document.getElementById('thread').scrollIntoView()")
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out))
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "out", nargs="?", type=Path, default=PROJECT / "docs" / "follow-up.png", help="the PNG"
    )
    options = parser.parse_args()
    with demo_app() as (url, password):
        shoot(url, password, options.out)
    print(f"saved {options.out}")


if __name__ == "__main__":
    main()
