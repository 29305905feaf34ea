"""Create the first user when there is none, so `make run` ends on a page you can log in to."""

import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create a first (staff, superuser) account when the database has no user."

    def add_arguments(self, parser):
        parser.add_argument("--username", default=os.environ.get("CANOPY_ADMIN_USER", "admin"))

    def handle(self, *args, username: str, **options):
        User = get_user_model()
        if User.objects.exists():
            return
        password = os.environ.get("CANOPY_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
        User.objects.create_superuser(username=username, email="", password=password)
        self.stdout.write(self.style.SUCCESS("Created the first user."))
        self.stdout.write(f"  username: {username}")
        if "CANOPY_ADMIN_PASSWORD" in os.environ:
            self.stdout.write("  password: the value of CANOPY_ADMIN_PASSWORD")
        else:
            self.stdout.write(f"  password: {password}   (shown once: write it down)")
