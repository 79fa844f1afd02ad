"""``manage.py generate_profile [--seed N] [--scenario banking|insurance] [--session ID]``."""

import datetime as dt
import json

from django.utils import timezone

from agents_app.models import DemoProfile
from voiceagent.management.base import ProjectCommand


class Command(ProjectCommand):
    help = "Generate a demo customer profile, store it for 24 h and print it as JSON."

    def add_arguments(self, parser):
        parser.add_argument("--seed", type=int, default=None, help="same seed, same profile")
        parser.add_argument("--scenario", choices=["banking", "insurance"], default="banking")

    def handle(self, *args, seed, scenario, **options):
        from agents_app.profiles import PROFILE_TTL_SECONDS, generate_profile

        profile = generate_profile(seed=seed, scenario=scenario)
        DemoProfile.objects.update_or_create(
            id=profile["id"],
            defaults={
                "scenario": scenario,
                "seed": profile.get("seed", 0),
                "full_name": profile["full_name"],
                "data": profile,
                "expires_at": timezone.now() + dt.timedelta(seconds=PROFILE_TTL_SECONDS),
            },
        )
        self.stdout.write(json.dumps(profile, indent=2))
