"""``python -m skrl_marl_ext`` is ``skrl-marl``."""

import sys

from skrl_marl_ext.cli import main

sys.exit(main())
