"""Code fingerprints of jobs computed on a copy of the sources (tests of what an edit reruns)."""

from __future__ import annotations

from leanlm import provenance


def fingerprints(jobs) -> dict[str, str]:
    """``{job: its code fingerprint now}`` of ``{job: (fingerprint function, anything)}``."""
    provenance._direct_imports.cache_clear()
    return {job: code() for job, (code, _) in jobs.items()}
