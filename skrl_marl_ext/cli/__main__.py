"""``python -m skrl_marl_ext.cli`` is ``skrl-marl``."""

import sys

from skrl_marl_ext.cli import main

sys.exit(main())
