"""``manage.py validate_agents [--root DIR]``: check every agent and scenario definition."""

from pathlib import Path

from django.conf import settings
from django.core.management.base import CommandError

from agents_app.catalog import FIXTURES_ROOT, builtin_tool_names, mcp_server_names
from agents_app.definitions import load_definitions
from voiceagent.management.base import ProjectCommand


class Command(ProjectCommand):
    help = "Validate agent and scenario definition files; print every problem; exit 1 on any error."
    needs_database = False  # runtime MCP servers are read when the table exists

    def add_arguments(self, parser):
        parser.add_argument(
            "--root", type=Path, default=FIXTURES_ROOT, help="definitions folder (default: fixtures/)"
        )

    def handle(self, *args, root: Path, **options):

        result = load_definitions(
            root,
            builtin_tool_names() | mcp_server_names(),
            tool_prefixes=mcp_server_names(),
            voices_dir=settings.CONFIG.TTS_VOICES_DIR,
        )
        for problem in result.problems:
            self.stdout.write(str(problem))
        summary = (
            f"{len(result.agents)} agent(s) and {len(result.scenarios)} scenario(s) valid; "
            f"{len(result.errors)} error(s), {len(result.warnings)} warning(s)"
        )
        if result.errors:
            raise CommandError(summary)
        self.stdout.write(self.style.SUCCESS(summary))
