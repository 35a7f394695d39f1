"""Real brokers come from logbus.testing (the `logbus_broker` fixture); shared helpers live in helpers.py."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
