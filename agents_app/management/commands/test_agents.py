"""``manage.py test_agents [PATH ...]``: run the declarative agent tests (``docs/evals.md``).

Exit status: 0 when every test passed (or was skipped), 1 on any failure or error, 2 when the
test files or the options are wrong (every problem listed, then one line saying why).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

from django.core.management.base import CommandError

from voiceagent.management.base import ProjectCommand

NOISY = ("voiceagent", "agents_app", "mcp_app", "calls", "bridge")


@contextlib.contextmanager
def quiet_loggers(names: tuple[str, ...]) -> Iterator[None]:
    """The table is the output: the engine's own log lines only at -v 2. The levels are put back
    afterwards - the command also runs in-process (call_command), where a level left at WARNING
    would silence those loggers for the rest of the process."""
    saved = {name: logging.getLogger(name).level for name in names}
    for name in names:
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


class Command(ProjectCommand):
    help = (
        "Run agent conversation tests from YAML (default fixtures/evals/) over the in-process engine "
        "or a running service's transport; exit 1 on any failure, 2 on bad files or options."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "paths", nargs="*", type=Path, help="test files or folders (default: fixtures/evals/)"
        )
        parser.add_argument(
            "--transport",
            default="engine",
            choices=["engine", "browser", "phone", "twilio", "audiohook"],
            help="engine (in process, default) or a running service's browser socket, phone media "
            "stream (ACS), Twilio Media Stream (signed with TWILIO_ACCOUNT_SID/TWILIO_AUTH_TOKEN from "
            "the environment) or AudioHook bridge (these need --url)",
        )
        parser.add_argument("--url", help="the running service, e.g. http://127.0.0.1:8000")
        parser.add_argument("--api-key", dest="api_key", help="an API key of that service")
        parser.add_argument("--junit", type=Path, help="write a JUnit XML report here")
        parser.add_argument("--json", dest="json_path", type=Path, help="write a JSON report here")
        parser.add_argument("-k", dest="keyword", help="only the tests whose suite::name contains this")
        parser.add_argument("--concurrency", type=int, default=1, help="tests run at once (default 1)")
        parser.add_argument(
            "--realtime",
            action="store_true",
            help="hear the agent's audio out in real time, as a caller would (engine and browser; "
            "by default the test caller says it played at once, so a test costs recognition and "
            "synthesis time, not the seconds the agent talks; the phone wires always take real time)",
        )
        parser.add_argument(
            "--turns",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="print each turn as it ends (default: on over a transport, off over the engine)",
        )

    def handle(self, *args, **options):
        from agents_app.evals.spec import SpecError, load_suites
        from agents_app.evals.targets import make_target

        if options["concurrency"] < 1:
            raise CommandError("--concurrency must be 1 or more", returncode=2)
        try:
            factory = make_target(
                options["transport"],
                url=options["url"],
                api_key=options["api_key"],
                realtime=options["realtime"],
            )
        except (ValueError, ImportError) as exc:
            raise CommandError(str(exc), returncode=2) from None
        try:
            tests = load_suites(options["paths"] or None)
        except SpecError as exc:
            for problem in exc.problems:
                self.stderr.write(problem)
            raise CommandError(f"{len(exc.problems)} problem(s) in the test files", returncode=2) from None
        keyword = options["keyword"]
        if keyword:
            tests = [t for t in tests if keyword.casefold() in t.id.casefold()]
            if not tests:
                raise CommandError(f"no test matches -k {keyword!r}", returncode=2)
        with quiet_loggers(NOISY if options["verbosity"] < 2 else ()):
            report = asyncio.run(self._run(tests, factory, options))
        from agents_app.evals.report import summary, write_json, write_junit

        if options["junit"]:
            write_junit(report, options["junit"])
        if options["json_path"]:
            write_json(report, options["json_path"])
        line = summary(report)
        if not report.ok:
            self.stdout.write(self.style.ERROR(line))
            raise CommandError(f"{report.failed} failed, {report.errors} errors", returncode=1)
        self.stdout.write(self.style.SUCCESS(line))

    async def _run(self, tests, factory, options):
        from agents_app.evals.judge import judge_for_runtime
        from agents_app.evals.report import Printer, TurnPrinter
        from agents_app.evals.runner import run

        engine = options["transport"] == "engine"
        if engine:
            from agents_app.evals.engine_target import start_engine, stop_engine

            await start_engine()
        styles = {
            "passed": self.style.SUCCESS,
            "failed": self.style.ERROR,
            "error": self.style.ERROR,
            "skipped": self.style.WARNING,
        }
        printer = Printer(self.stdout.write, len(tests), style=lambda status, text: styles[status](text))
        turns = options.get("turns")
        if turns is None:
            turns = not engine  # a transport takes seconds a turn: say where the run is
        on_turn = TurnPrinter(self._write_now) if turns else None
        try:
            if engine:
                self._check_scenarios(tests)
            return await run(
                tests,
                factory,
                on_result=printer,
                judge=judge_for_runtime(),
                concurrency=options["concurrency"],
                on_turn=on_turn,
            )
        finally:
            if engine:
                await stop_engine()

    def _write_now(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

    def _check_scenarios(self, tests) -> None:
        """Over the engine the scenarios are known here: a misspelt one is a bad file (exit 2)."""
        from agents_app.catalog import catalog

        problems = sorted(
            {
                f"{t.file}: test {t.name!r}: unknown scenario {t.scenario!r}"
                for t in tests
                if not catalog.scenario(t.scenario)
            }
        )
        if problems:
            for problem in problems:
                self.stderr.write(problem)
            known = ", ".join(sorted(catalog.scenarios)) or "none"
            raise CommandError(
                f"{len(problems)} test(s) name an unknown scenario (known: {known})", returncode=2
            )
