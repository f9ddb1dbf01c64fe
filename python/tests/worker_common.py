"""What every test worker does first: a watchdog, and the communicator."""

import faulthandler
import os
import sys

# a hang prints every thread's stack before the harness kills the rank
faulthandler.dump_traceback_later(float(os.environ.get("HCCL_RS_TEST_TIMEOUT", "90")) - 5, exit=True)


def scenario(table):
    """Runs the scenario named by argv[1] from ``table``."""
    name = sys.argv[1]
    table[name](*sys.argv[2:])
    print(f"rank {os.environ.get('RANK')} ok: {name}", flush=True)
