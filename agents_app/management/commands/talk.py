"""``manage.py talk [--scenario S] [--agent A] [--wav FILE ...] [--mic]``: talk to the agents in
the terminal, on the service's own engine (:mod:`agents_app.talk`).

Exit status: 0 at the end of input (or ``/quit``, or when the agent ends the conversation), 2 for
bad options or files (an unknown scenario or agent, an unreadable WAV, ``--mic`` without a sound
device), 1 when the conversation could not run.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from django.core.management.base import CommandError

from agents_app.management.commands.test_agents import NOISY, quiet_loggers
from voiceagent.management.base import ProjectCommand


class Command(ProjectCommand):
    help = (
        "Talk to the agents in the terminal: typed lines from standard input (pipeable), WAV files "
        "as the caller's speech, or the microphone; prints transcripts, tool calls, handoffs and "
        "per-turn timings, and stores the session."
    )

    stealth_options = ("stdin",)  # call_command(..., stdin=StringIO): tests and embedding

    def add_arguments(self, parser):
        parser.add_argument("--scenario", help="scenario to talk to (default: default)")
        parser.add_argument("--agent", help="start with this agent of the scenario")
        parser.add_argument(
            "--wav",
            action="append",
            type=Path,
            default=[],
            metavar="FILE",
            help="a WAV file spoken as one caller turn (repeatable; before the typed lines)",
        )
        parser.add_argument(
            "--mic", action="store_true", help="the microphone and speaker (needs a sound device)"
        )
        parser.add_argument("--seed", type=int, help="a seeded demo caller (as POST /profiles/generate)")

    def handle(self, *args, **options):
        from agents_app.talk import TalkError, TalkOptions, talk

        talk_options = TalkOptions(
            scenario=options["scenario"],
            agent=options["agent"],
            wavs=list(options["wav"]),
            mic=options["mic"],
            seed=options["seed"],
        )
        stdin = options.get("stdin") or sys.stdin
        with quiet_loggers(NOISY if options["verbosity"] < 2 else ()):
            try:
                asyncio.run(talk(talk_options, stdin, self._write))
            except TalkError as exc:
                raise CommandError(str(exc), returncode=2) from None
            except KeyboardInterrupt:  # Ctrl-C ends a --mic conversation: closed and stored by then
                self._write("-- ended (Ctrl-C)")
            except (RuntimeError, OSError) as exc:
                raise CommandError(f"the conversation could not run: {exc}", returncode=1) from None

    def _write(self, line: str) -> None:
        ending = "" if line == "> " else "\n"
        self.stdout.write(line, ending=ending)
        self.stdout.flush()
