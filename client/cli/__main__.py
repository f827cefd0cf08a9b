"""``python -m phasegate.client.cli``: the ``phasegate`` command."""

import sys

from phasegate.client.cli import main

sys.exit(main())
