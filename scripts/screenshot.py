"""Take screenshots of a finished run page, its report on stage: docs/run-page.png and, at
390x844, docs/run-page-phone.png (beside it, `-phone` added to its name); and beside them
docs/clarify.png: a research on a short topic waiting for the analyst to answer the demo
lead's questions before it starts (the demo asks when a topic has fewer than five words).

Starts everything it needs in a temporary folder and needs no network and no key: a SQLite
database with the starter dataset, daphne with the agent pool (the embedded default), and the
offline demo model. It then drives Debian's Chromium through a research, from the login form to
the report, and saves the page.

    .venv/bin/python scripts/screenshot.py [docs/run-page.png] [--width 1440 --height 1000]
"""

import argparse
import os
import re
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Page, expect, sync_playwright

PROJECT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]
USERNAME = "analyst"
TOPIC = "How do Python's context managers, generators and exceptions interact?"
SHORT_TOPIC = "Python decorators"
DATASET = "Python reference"
ATTEMPTS = 3


def environment(folder: Path) -> dict[str, str]:
    """The embedded default in a temporary folder: no Redis, no LLM endpoint (demo model)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OPENAI_", "RESEARCH_", "REDIS_", "DATABASE_", "SEARCH_"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="research.settings",
        DATABASE_URL=f"sqlite:///{folder / 'canopy.sqlite3'}",
        SECRET_KEY=secrets.token_urlsafe(40),
        CANOPY_ADMIN_PASSWORD=secrets.token_urlsafe(12),
        PYTHONUNBUFFERED="1",
    )
    return env


def manage(env: dict[str, str], *args: str) -> None:
    subprocess.run(
        [sys.executable, "manage.py", *args], cwd=PROJECT, env=env, check=True,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip


def prepare(env: dict[str, str]) -> None:
    manage(env, "migrate", "--noinput")
    manage(env, "first_user", "--username", USERNAME)
    manage(env, "load_starter_dataset", "--user", USERNAME)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(env: dict[str, str], log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
         "research.asgi:application"],
        cwd=PROJECT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"daphne exited:\n{log.read_text()}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return process, f"http://127.0.0.1:{port}"
        time.sleep(0.1)
    process.terminate()
    raise SystemExit("daphne did not start within 30 seconds")


def log_in(page: Page, url: str, password: str) -> None:
    page.goto(f"{url}/login/")
    page.get_by_label("Username").fill(USERNAME)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()


def run_research(page: Page, url: str) -> None:
    page.goto(f"{url}/")
    page.get_by_label("What should Canopy research?").fill(TOPIC)
    page.get_by_label("Knowledge base").select_option(label=DATASET)
    page.get_by_role("button", name="Start research").click()
    page.wait_for_url(re.compile(r"/runs/\d+/"))
    expect(page.locator("#run-status")).to_have_text("done", timeout=120_000)
    expect(page.locator("#report")).to_be_visible(timeout=10_000)
    page.wait_for_timeout(800)  # let the last node settle (its appear animation)


def shoot_clarify(page: Page, url: str, out: Path) -> None:
    """The clarify step: the lead's questions on the page, the first one being answered."""
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{url}/")
    page.get_by_label("What should Canopy research?").fill(SHORT_TOPIC)
    page.get_by_label("Knowledge base").select_option(label=DATASET)
    page.get_by_role("button", name="Start research").click()
    page.wait_for_url(re.compile(r"/runs/\d+/"))
    expect(page.locator("#clarify-form")).to_be_visible(timeout=60_000)
    page.locator("#clarify-answer-1").fill("How they wrap functions, and functools.wraps")
    page.wait_for_timeout(500)  # the panel beside it loads
    page.screenshot(path=str(out.with_name("clarify.png")))
    page.get_by_role("button", name="Skip and start").click()  # it ends with the server


def shoot(url: str, password: str, out: Path, width: int, height: int) -> None:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": width, "height": height})
        log_in(page, url, password)
        # The demo's agents message a sibling only if one is still working when they look:
        # a research where all of them finished first has no arrow to show. Try again then.
        for _ in range(ATTEMPTS):
            run_research(page, url)
            if page.locator(".message-arrow").count():
                break
        out.parent.mkdir(parents=True, exist_ok=True)
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(out))
        phone = browser.new_context(viewport={"width": 390, "height": 844}, has_touch=True)
        phone.add_cookies(page.context.cookies())
        small = phone.new_page()
        small.goto(page.url)
        expect(small.locator("#report")).to_be_visible(timeout=10_000)
        small.evaluate("document.getElementById('run-tabs').scrollIntoView()")
        small.screenshot(path=str(out.with_name(f"{out.stem}-phone{out.suffix}")))
        shoot_clarify(page, url, out)
        browser.close()


@contextmanager
def demo_app() -> Iterator[tuple[str, str]]:
    """A fresh demo app served by daphne for the time of the block: (its URL, the first
    user's password). Chromium must be there; everything lives in a temporary folder."""
    if not os.path.exists(CHROMIUM):
        raise SystemExit(f"{CHROMIUM} is missing: apt-get install chromium")
    with tempfile.TemporaryDirectory(prefix="canopy-screenshot-") as folder:
        env = environment(Path(folder))
        prepare(env)
        process, url = serve(env, Path(folder) / "daphne.log")
        try:
            yield url, env["CANOPY_ADMIN_PASSWORD"]
        finally:
            process.terminate()
            process.wait(20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "out", nargs="?", type=Path, default=PROJECT / "docs" / "run-page.png", help="the PNG"
    )
    parser.add_argument("--width", type=int, default=1440)
    parser.add_argument("--height", type=int, default=1000)
    options = parser.parse_args()
    with demo_app() as (url, password):
        shoot(url, password, options.out, options.width, options.height)
    print(f"saved {options.out}")


if __name__ == "__main__":
    main()
