"""Formatting shared by views and template filters."""

from __future__ import annotations


def format_duration(seconds: float | None) -> str:
    """0.8 s, 12 s, 3 min 05 s, 2 h 04 min, 3 d 2 h; an em dash when unknown."""
    if seconds is None:
        return "—"
    if seconds < 10:
        return f"{max(0.0, seconds):.1f} s"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"
