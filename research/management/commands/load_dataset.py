"""Load every supported file of a folder (text, Markdown, HTML, PDF) into a user's dataset.

Files already in the dataset (same bytes) are skipped, so running it again after adding files
loads only the new ones. A file that cannot be read is reported and the others still load;
the command then exits non-zero so a script notices.
"""

from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from research.clean import strip_controls
from research.errors import Conflict, ResearchError
from research.models import Dataset
from research.services.datasets import dataset_create, document_add, file_type


def supported_files(folder: Path) -> list[Path]:
    """The folder's supported files, recursively, in a stable order, hidden ones left out."""
    return sorted(
        path
        for path in folder.rglob("*")
        if path.is_file()
        and not any(part.startswith(".") for part in path.relative_to(folder).parts)
        and file_type(path.name) is not None
    )


class Command(BaseCommand):
    help = "Load every text, Markdown, HTML and PDF file of a folder into a dataset."

    def add_arguments(self, parser):
        parser.add_argument("folder", help="the folder to load (searched recursively)")
        parser.add_argument("--name", required=True, help="the dataset (created if missing)")
        parser.add_argument("--user", required=True, help="the username that owns the dataset")
        parser.add_argument("--description", default="", help="for a new dataset")

    def handle(self, *args, folder: str, name: str, user: str, description: str, **options):
        root = Path(folder).expanduser()
        if not root.is_dir():
            raise CommandError(f"no folder {folder}: give the path of a folder of documents.")
        owner = get_user_model().objects.filter(username=user).first()
        if owner is None:
            raise CommandError(f"no user named {user!r}: create it first (createsuperuser).")
        files = supported_files(root)
        if not files:
            raise CommandError(f"{folder} has no text, Markdown, HTML or PDF file.")
        # The name as dataset_create stores it, so a second run finds the dataset it made.
        dataset = Dataset.objects.filter(owner=owner, name=strip_controls(name).strip()).first()
        if dataset is None:
            try:
                dataset = dataset_create(owner=owner, name=name, description=description)
            except ResearchError as error:
                raise CommandError(f"invalid --name: {error.message}") from None
            self.stdout.write(f"Created dataset {dataset.name!r} (id {dataset.pk}).")
        self.loaded = self.skipped = 0
        self.failures: list[str] = []
        if self.stdout.isatty():
            self._load_with_progress(dataset, root, files)
        else:
            for path in files:
                self.stdout.write(self._load(dataset, root, path))
        self._summary(dataset)

    def _load_with_progress(self, dataset: Dataset, root: Path, files: list[Path]) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn()]
        with Progress(*columns, transient=True) as progress:
            task = progress.add_task("Loading", total=len(files))
            for path in files:
                progress.update(task, description=f"Loading {path.relative_to(root)}")
                line = self._load(dataset, root, path)
                if line.startswith("failed"):
                    progress.console.print(line, markup=False)
                progress.advance(task)

    def _load(self, dataset: Dataset, root: Path, path: Path) -> str:
        """Load one file; the line that tells what happened to it."""
        relative = path.relative_to(root).as_posix()
        try:
            data = path.read_bytes()
        except OSError as error:  # unreadable, or gone since the folder was listed
            return self._failed(relative, error.strerror or str(error))
        try:
            document = document_add(
                dataset=dataset,
                title=Path(relative).with_suffix("").as_posix(),
                data=data,
                filename=path.name,
                source=relative,
                title_given=False,  # the file's path: its text's heading names it
            )
        except Conflict:  # the dataset holds this file already (document_add refuses a copy)
            self.skipped += 1
            return f"skipped {relative}: already in the dataset"
        except ResearchError as error:
            return self._failed(relative, error.message)
        self.loaded += 1
        return f"loaded  {relative} ({document.chunks.count()} chunks)"

    def _failed(self, relative: str, reason: str) -> str:
        self.failures.append(f"{relative}: {reason}")
        return f"failed  {relative}: {reason}"

    def _summary(self, dataset: Dataset) -> None:
        total = dataset.documents.count()
        self.stdout.write(
            self.style.SUCCESS(
                f"Dataset {dataset.name!r} (id {dataset.pk}): loaded {self.loaded}, "
                f"skipped {self.skipped}, failed {len(self.failures)}; {total} documents in all."
            )
        )
        if self.failures:
            raise CommandError(
                f"{len(self.failures)} file(s) could not be loaded:\n  "
                + "\n  ".join(self.failures)
            )
