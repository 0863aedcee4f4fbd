"""``python -m numeq``: the numeq command line."""

from .cli import main

raise SystemExit(main())
