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


def state_at_failure(page: Page, folder: Path, name: str) -> str:
    """What a failed browser test's page showed, for its report: the address, the title, the
    start of the text, and a screenshot in `folder`. A flake on a loaded CI machine can then be
    told from a page that never drew (a refused or empty answer) by reading the log alone. Each
    step is short and may fail on its own (a hung or closed page)."""
    lines = []
    for label, read in (
        ("address", lambda: page.url),
        ("title", lambda: page.title()),
        ("text", lambda: page.inner_text("body", timeout=2000)[:1500]),
    ):
        try:
            lines.append(f"{label}: {read()}")
        except Exception as error:  # the page may be gone, or hung: say so and go on
            lines.append(f"{label}: unreadable ({type(error).__name__}: {error})")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{name}.png"
        page.screenshot(path=path, timeout=5000)
        lines.append(f"screenshot: {path}")
    except Exception as error:
        lines.append(f"screenshot: none ({type(error).__name__}: {error})")
    return "\n".join(lines)


def screenshots(default: str) -> Path:
    """Where a module's screenshots go: SCREENSHOTS, else `default`."""
    return Path(os.environ.get("SCREENSHOTS", default))


def shot(page: Page, folder: Path, name: str, *, full_page: bool) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=folder / f"{page.size_name}-{name}.png", full_page=full_page)


def no_sideways_scroll(page: Page, moment: str = "") -> None:
    widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"{moment or page.url}: the page scrolls sideways ({widths})"
