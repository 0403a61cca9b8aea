"""Which vLLM release a start-up ran when its report gives only a date.

A public report that names no version (no banner, no engine-init line) but has a date is taken
to run the newest vLLM release published on or before that date: a ``pip install vllm`` or a
``vllm/vllm-openai:latest`` pull on that day gets exactly that release, and an older install
would have to be stated. A date given to the month only is read as the month's last day. A
nightly or source build of that date carries at least that release's code (its later changes are
unknown), so the same release is its best-supported rules. The dates are the first upload times
of each release's files on PyPI (https://pypi.org/pypi/vllm/json, ``releases[X][*].upload_time``,
read 2026-12-03; final releases only, from 0.6.0).
"""

from __future__ import annotations

import calendar
import re
from datetime import date

RELEASE_DATES: tuple[tuple[str, str], ...] = (
    ("0.6.0", "2024-09-05"),
    ("0.6.1", "2024-09-11"),
    ("0.6.2", "2024-09-25"),
    ("0.6.3", "2024-10-14"),
    ("0.6.4", "2024-11-15"),
    ("0.6.5", "2024-12-18"),
    ("0.6.6", "2024-12-27"),
    ("0.7.0", "2025-01-27"),
    ("0.7.1", "2025-02-01"),
    ("0.7.2", "2025-02-06"),
    ("0.7.3", "2025-02-20"),
    ("0.8.0", "2025-03-18"),
    ("0.8.1", "2025-03-19"),
    ("0.8.2", "2025-03-25"),
    ("0.8.3", "2025-04-06"),
    ("0.8.4", "2025-04-15"),
    ("0.8.5", "2025-04-28"),
    ("0.9.0", "2025-05-28"),
    ("0.9.0.1", "2025-05-30"),
    ("0.9.1", "2025-06-10"),
    ("0.9.2", "2025-07-08"),
    ("0.10.0", "2025-07-25"),
    ("0.10.1", "2025-08-19"),
    ("0.10.1.1", "2025-08-20"),
    ("0.10.2", "2025-09-13"),
    ("0.11.0", "2025-10-04"),
    ("0.11.1", "2025-11-19"),
    ("0.11.2", "2025-11-20"),
    ("0.12.0", "2025-12-03"),
    ("0.13.0", "2025-12-19"),
    ("0.14.0", "2026-01-20"),
    ("0.14.1", "2026-01-24"),
    ("0.15.0", "2026-01-29"),
    ("0.15.1", "2026-02-05"),
    ("0.16.0", "2026-02-26"),
    ("0.17.0", "2026-03-07"),
    ("0.17.1", "2026-03-11"),
    ("0.18.0", "2026-03-20"),
    ("0.18.1", "2026-03-31"),
    ("0.19.0", "2026-04-03"),
    ("0.19.1", "2026-04-18"),
    ("0.20.0", "2026-04-27"),
    ("0.20.1", "2026-05-03"),
    ("0.20.2", "2026-05-10"),
    ("0.21.0", "2026-05-15"),
    ("0.22.0", "2026-05-29"),
    ("0.22.1", "2026-06-05"),
    ("0.23.0", "2026-06-13"),
    ("0.24.0", "2026-06-30"),
    ("0.25.0", "2026-07-11"),
    ("0.25.1", "2026-07-14"),
    ("0.26.0", "2026-07-25"),
    ("0.27.0", "2026-08-10"),
    ("0.27.1", "2026-08-11"),
    ("0.28.0", "2026-08-26"),
    ("0.29.0", "2026-09-09"),
    ("0.30.0", "2026-09-22"),
    ("0.31.0", "2026-10-05"),
    ("0.32.0", "2026-10-18"),
    ("0.33.0", "2026-11-02"),
    ("0.34.0", "2026-11-16"),
)

_DATE = re.compile(r"(?<!\d)(20\d\d)-(\d\d)(?:-(\d\d))?(?!\d)")


def date_in(text: str) -> date | None:
    """The first YYYY-MM-DD (or YYYY-MM: that month's last day) in ``text``, else None."""
    m = _DATE.search(text or "")
    if not m:
        return None
    year, month = int(m.group(1)), int(m.group(2))
    if not 1 <= month <= 12:
        return None
    day = int(m.group(3)) if m.group(3) else calendar.monthrange(year, month)[1]
    try:
        return date(year, month, day)
    except ValueError:
        return None


def release_on_or_before(when: date) -> str | None:
    """The newest release of ``RELEASE_DATES`` published on or before ``when``."""
    best = None
    for version, published in RELEASE_DATES:
        if date.fromisoformat(published) <= when:
            best = version
    return best


def release_from_date_text(text: str | None) -> tuple[str, str] | None:
    """(release, note) for a version column that gives only a date, such as
    'unknown (2025-07-22)'; None when the text names no date or predates the table."""
    when = date_in(text or "")
    release = release_on_or_before(when) if when else None
    if when is None or release is None:
        return None
    published = dict(RELEASE_DATES)[release]
    return release, (
        f"vLLM version not in the log: {release}, the newest release on or before "
        f"{when.isoformat()} (published {published} on PyPI; memory/release_dates.py)"
    )
