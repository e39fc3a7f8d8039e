#!/usr/bin/env python
"""Django's command-line utility for Glassbox."""

import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "glassbox.settings")
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
        sys.stdout.flush()  # inside the try: what is still buffered may meet a closed pipe too
    except BrokenPipeError:
        # The reader of our output went away (`manage.py launch … | head -1`): stop quietly, as
        # the Python docs advise (signal module, "Note on SIGPIPE"). Whatever a command started
        # (a launched run) goes on; stdout points at devnull so the flush at exit cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


if __name__ == "__main__":
    main()
