"""``python -m specviz``: see :mod:`specviz.cli`."""

import sys

from specviz.cli import main

sys.exit(main())
