"""Maintenance commands (compaction, handoff, clean, recover, verify) are added here."""

from __future__ import annotations
