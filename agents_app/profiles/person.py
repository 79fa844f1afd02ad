"""The person behind a demo profile: name, contact details, address, identity and MFA settings.

Drawn from the seed alone, so the same seed is the same person in every scenario. Phone numbers
use the unassigned ``555`` area code and e-mail addresses the reserved ``example.*`` domains.
"""

from __future__ import annotations

import random
import unicodedata
from datetime import date
from typing import Any

from agents_app.profiles.draws import random_digits

_MFA_CODE_LENGTH = 6

_FIRST_NAMES = (
    "Aisha", "Alejandro", "Amara", "Ana", "André", "Benjamin", "Chen", "Chloé", "Daniel", "Deepa",
    "Diego", "Elena", "Emily", "Fatima", "Gabriel", "Grace", "Hana", "Hiroshi", "Isabella", "Jamal",
    "James", "José", "Kai", "Kwame", "Laura", "Liam", "Lucía", "Malik", "Maria", "Mei", "Mohammed",
    "Nadia", "Noah", "Olivia", "Priya", "Rafael", "Rosa", "Samuel", "Sofia", "Tariq", "Thomas",
    "Valentina", "Wei", "Yusuf", "Zoë",
)  # fmt: skip
_LAST_NAMES = (
    "Adeyemi", "Anderson", "Brown", "Chen", "Cohen", "Davis", "Díaz", "Fernández", "Garcia",
    "Gupta", "Hernández", "Ibrahim", "Johnson", "Kim", "Kowalski", "Lee", "Martin", "Mendoza",
    "Miller", "Müller", "Nakamura", "Nguyen", "O'Connor", "Okafor", "Patel", "Petrov", "Rahman",
    "Robinson", "Rossi", "Santos", "Schmidt", "Silva", "Singh", "Smith", "Sullivan", "Tanaka",
    "Thompson", "Walker", "Williams", "Wong", "Yamamoto",
)  # fmt: skip
_EMAIL_DOMAINS = ("example.com", "example.net", "example.org")

# (city, state, first three digits of its ZIP codes)
_CITIES = (
    ("Seattle", "WA", "981"), ("Portland", "OR", "972"), ("San Diego", "CA", "921"),
    ("Phoenix", "AZ", "850"), ("Denver", "CO", "802"), ("Austin", "TX", "787"),
    ("Minneapolis", "MN", "554"), ("Chicago", "IL", "606"), ("Columbus", "OH", "432"),
    ("Nashville", "TN", "372"), ("Atlanta", "GA", "303"), ("Miami", "FL", "331"),
    ("Raleigh", "NC", "276"), ("Boston", "MA", "021"), ("Philadelphia", "PA", "191"),
)  # fmt: skip
_STREETS = (
    "Maple", "Oak", "Cedar", "Pine", "Elm", "Lakeview", "Hillcrest", "Sunset", "Park", "Washington",
    "Lincoln", "Riverside", "Highland", "Willow", "Franklin", "Meadow",
)  # fmt: skip
_STREET_SUFFIXES = ("Street", "Avenue", "Road", "Lane", "Drive", "Court", "Boulevard", "Way")


def ascii_slug(text: str) -> str:
    """``text`` folded to lowercase ASCII letters and digits: ``"O'Connor"`` -> ``"oconnor"``."""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return "".join(ch for ch in folded.lower() if ch.isalnum())


def draw_person(rng: random.Random, today: date) -> dict[str, Any]:
    """The person's details; the age on ``today`` is 21 to 85."""
    first = rng.choice(_FIRST_NAMES)
    last = rng.choice(_LAST_NAMES)
    first_slug, last_slug = ascii_slug(first), ascii_slug(last)
    pattern = rng.randrange(4)
    if pattern == 0:
        local = f"{first_slug}.{last_slug}"
    elif pattern == 1:
        local = f"{first_slug}.{last_slug}{rng.randint(10, 99)}"
    elif pattern == 2:
        local = f"{first_slug}_{last_slug}"
    else:
        local = f"{first_slug[0]}{last_slug}"
    email = f"{local}@{rng.choice(_EMAIL_DOMAINS)}"
    phone = "+1555" + random_digits(rng, 7)

    city, state, zip_prefix = rng.choice(_CITIES)
    address = {
        "street": f"{rng.randint(12, 9899)} {rng.choice(_STREETS)} {rng.choice(_STREET_SUFFIXES)}",
        "city": city,
        "state": state,
        "postal_code": f"{zip_prefix}{rng.randint(1, 99):02d}",
        "country": "US",
    }

    # Born in (this year - age - 1): the age today is `age` or `age + 1`, so 21..85.
    age = rng.randint(21, 84)
    month, day = rng.randint(1, 12), rng.randint(1, 28)
    date_of_birth = date(today.year - age - 1, month, day).isoformat()
    ssn_last4 = f"{rng.randint(1, 9999):04d}"
    client_id = "CL-" + random_digits(rng, 8)
    mfa_method = rng.choice(("sms", "sms", "email"))
    return {
        "first_name": first,
        "last_name": last,
        "full_name": f"{first} {last}",
        "email": email,
        "phone_number": phone,
        "address": address,
        "client_id": client_id,
        "mfa": {"method": mfa_method, "enabled": True, "code_length": _MFA_CODE_LENGTH},
        "verification": {"ssn_last4": ssn_last4, "date_of_birth": date_of_birth},
    }
