"""Static files under hashed names (`canopy.3f2a1b9c0d4e.js`), so a browser never keeps an
old `canopy.js` after an upgrade, served by ServeStatic from the ASGI process itself.

`manage.py collectstatic` (which `make run` runs) writes the hashed, compressed copies and
their manifest into STATIC_ROOT. A checkout that never ran it still works: with no manifest
the pages name the source files as they are, and ServeStatic serves them from the source
folders (SERVESTATIC_USE_FINDERS).
"""

from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.core.files.storage import FileSystemStorage
from django.http import HttpRequest
from servestatic.middleware import ServeStaticMiddleware
from servestatic.storage import CompressedManifestStaticFilesStorage


class StaticStorage(CompressedManifestStaticFilesStorage):
    # The run page is ES modules that import each other (static/page/): their imports are
    # rewritten to the hashed names too, so a module never mixes with one of an older build.
    support_js_module_import_aggregation = True

    def url(self, name: str | None, force: bool = False) -> str:
        if not self.hashed_files and not force:
            # No manifest: never collected. The source file, under its own name.
            return FileSystemStorage.url(self, name)
        return super().url(name, force)


class StaticFilesMiddleware:
    """ServeStatic's middleware where Django builds its chain in async mode (the handler of
    static files, research/ops/http.py); a pass-through in a sync chain (the one-hop handler
    of every other request, which no static path reaches). ServeStatic's own middleware is
    async only: in a sync chain Django would adapt it, at two more thread crossings a
    request. So static files are served by daphne's async handler only, not by a sync one
    (Django's test client)."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable) -> None:
        if iscoroutinefunction(get_response):
            self.get_response = ServeStaticMiddleware(get_response)
            markcoroutinefunction(self)
        else:
            self.get_response = get_response

    def __call__(self, request: HttpRequest) -> Any:
        return self.get_response(request)
