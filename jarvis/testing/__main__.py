"""`python -m jarvis.testing serve ...` (see jarvis.testing.cli)."""

from jarvis.testing.cli import main

raise SystemExit(main())
