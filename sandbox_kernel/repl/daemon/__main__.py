"""`python -m sandbox_kernel.repl.daemon`: serve in the foreground."""

from __future__ import annotations

import sys

from sandbox_kernel.repl.daemon.server import main

sys.exit(main())
