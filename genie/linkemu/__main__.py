"""``python -m genie.linkemu --config JSON``: the link-emulator process (see genie.linkemu.emulator)."""

import sys

from genie.linkemu.emulator import main

sys.exit(main())
