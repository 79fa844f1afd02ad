"""``manage.py create_api_key <name>``: print a new API key once; only its hash is stored."""

from voiceagent.management.base import ProjectCommand
from voiceagent.models import ApiKey


class Command(ProjectCommand):
    help = "Create an API key for a client. The key is printed once and stored only as a hash."

    def add_arguments(self, parser):
        parser.add_argument("name", help="who or what uses the key (e.g. 'dashboard', 'ci')")

    def handle(self, *args, name: str, **options):
        key, raw = ApiKey.create_key(name)
        self.stderr.write(
            f"Created API key '{key.name}' ({key.prefix}…). Store it now; it is not shown again."
        )
        self.stdout.write(raw)
