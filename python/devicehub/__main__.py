"""`python -m devicehub` runs the command-line interface."""

from devicehub.cli import main

raise SystemExit(main())
