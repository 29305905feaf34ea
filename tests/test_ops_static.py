"""Static files on a real daphne: hashed names once collected (a browser never keeps an old
canopy.js after an upgrade), cached for ever and compressed; the source names before."""

import re
import subprocess
import sys

import httpx
import pytest

from tests.conftest import PROJECT, process_env, start_daphne

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def collectstatic(settings, root) -> None:
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"],
        cwd=PROJECT,
        env=process_env(settings, STATIC_ROOT=str(root)),
        check=True,
    )


def test_collected_files_have_hashed_names_cached_for_ever_and_compressed(
    scripted_llm, settings, tmp_path
):
    root = tmp_path / "static"
    collectstatic(settings, root)
    server = start_daphne(settings, tmp_path, STATIC_ROOT=str(root))
    try:
        page = httpx.get(f"{server.url}/login/").text
        style = re.search(r'href="(/static/canopy\.[0-9a-f]{12}\.css)"', page)
        assert style, page
        response = httpx.get(server.url + style[1], headers={"Accept-Encoding": "gzip"})
        plain = httpx.get(server.url + style[1], headers={"Accept-Encoding": "identity"})
    finally:
        server.stop()
    assert response.status_code == 200
    assert "immutable" in response.headers["Cache-Control"]
    assert "max-age=315360000" in response.headers["Cache-Control"]
    assert response.headers["Content-Encoding"] == "gzip"
    assert response.headers["Content-Type"].startswith("text/css")
    assert response.content == (root / "canopy.css").read_bytes()
    assert plain.content == response.content and "Content-Encoding" not in plain.headers


def test_a_checkout_that_never_collected_serves_the_source_files(scripted_llm, settings, tmp_path):
    server = start_daphne(settings, tmp_path, STATIC_ROOT=str(tmp_path / "never-collected"))
    try:
        page = httpx.get(f"{server.url}/login/").text
        response = httpx.get(f"{server.url}/static/canopy.css")
    finally:
        server.stop()
    assert 'href="/static/canopy.css"' in page
    assert response.status_code == 200
    assert response.content == (PROJECT / "static" / "canopy.css").read_bytes()
    assert "immutable" not in response.headers.get("Cache-Control", "")


def test_the_run_pages_modules_import_each_other_by_their_hashed_names(
    scripted_llm, settings, tmp_path
):
    root = tmp_path / "static"
    collectstatic(settings, root)
    [entry] = [path for path in root.glob("canopy.*.js") if not path.name.endswith(".gz")]
    imports = re.findall(r'from "(\./page/[^"]+)"', entry.read_text())
    assert imports and all(re.fullmatch(r"\./page/\w+\.[0-9a-f]{12}\.js", name) for name in imports)
    server = start_daphne(settings, tmp_path, STATIC_ROOT=str(root))
    try:
        for name in imports:
            module = httpx.get(f"{server.url}/static/page/{name.removeprefix('./page/')}")
            assert module.status_code == 200
            assert "immutable" in module.headers["Cache-Control"]
            assert module.headers["Content-Type"].startswith("text/javascript")
    finally:
        server.stop()
