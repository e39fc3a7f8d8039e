"""Dates and times as the pages give them, where Django's own English formats are used (the admin:
the audit log's times, a run's start, an agent's last change): "2026-11-28 15:00:57 UTC".

Django's default, "Nov. 28, 2026, 3 p.m.", dropped the minutes and seconds of 15:00:57 and named no
time zone, so two events a minute apart read alike in the audit log. Only these two formats
change; what the admin's forms accept is Django's as before.
"""

DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i T"
