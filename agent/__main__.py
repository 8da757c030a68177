"""``python -m opptune.agent`` = ``opptune-agent``."""

import sys

from .cli import main

sys.exit(main())
