"""``python -m ragport.cli``: the ``ragport`` command."""

from ragport.cli import main

raise SystemExit(main())
