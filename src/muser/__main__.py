"""`python -m muser ...`: see muser.cli."""

from muser.cli import main

raise SystemExit(main())
