"""What the Chromium tests share: the two sizes a page change is proven at, a page at one
of them that fails its test on a JavaScript error, screenshots to look at, and the phone's
first rule (nothing scrolls sideways). The browser and daphne fixtures are in test_browser.py."""

import os
from collections.abc import Iterator
from pathlib import Path

from playwright.sync_api import Browser, Page

SIZES = {"desktop": (1440, 900), "phone": (390, 844)}


def sized_page(
    browser: Browser, size: str, *, init_scripts: tuple[str, ...] = ()
) -> Iterator[Page]:
    """A page at `size` in a context of its own (touch on the phone), the `init_scripts` run
    before each document; yield it from a fixture. A JavaScript error fails the test."""
    width, height = SIZES[size]
    context = browser.new_context(
        viewport={"width": width, "height": height}, has_touch=size == "phone"
    )
    for script in init_scripts:
        context.add_init_script(script)
    page = context.new_page()
    page.size_name = size
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert errors == [], "the page raised JavaScript errors"


def screenshots(default: str) -> Path:
    """Where a module's screenshots go: SCREENSHOTS, else `default`."""
    return Path(os.environ.get("SCREENSHOTS", default))


def shot(page: Page, folder: Path, name: str, *, full_page: bool) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=folder / f"{page.size_name}-{name}.png", full_page=full_page)


def no_sideways_scroll(page: Page, moment: str = "") -> None:
    widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"{moment or page.url}: the page scrolls sideways ({widths})"
