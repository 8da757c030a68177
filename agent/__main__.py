"""``python -m opptune.agent`` = ``opptune-agent``."""

import sys

from .entry import main

sys.exit(main())
