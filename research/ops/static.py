"""Static files under hashed names (`canopy.3f2a1b9c0d4e.js`), so a browser never keeps an
old `canopy.js` after an upgrade, served by ServeStatic from the ASGI process itself.

`manage.py collectstatic` (which `make run` runs) writes the hashed, compressed copies and
their manifest into STATIC_ROOT. A checkout that never ran it still works: with no manifest
the pages name the source files as they are, and ServeStatic serves them from the source
folders (SERVESTATIC_USE_FINDERS).
"""

from django.core.files.storage import FileSystemStorage
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
