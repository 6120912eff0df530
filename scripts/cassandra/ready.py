"""Used by scripts/cassandra.sh: does CQL answer on 127.0.0.1:PORT? With --setup, also make the login role.

    ready.py PORT            exit 0 when `SELECT release_version FROM system.local` answers
    ready.py PORT --setup    also create (if missing) the role HOOKBRIDGE_CASSA_USER / _PASSWORD
                             (default hookbridge / hookbridge), logged in as the default superuser

Runs with the project's virtualenv (it needs cassandra-driver).
"""

from __future__ import annotations

import os
import sys
import warnings

warnings.simplefilter("ignore")  # the driver's own deprecation notices are not the script's business

from cassandra.auth import PlainTextAuthProvider  # noqa: E402
from cassandra.cluster import Cluster  # noqa: E402
from cassandra.policies import WhiteListRoundRobinPolicy  # noqa: E402

SUPERUSER = ("cassandra", "cassandra")  # the default superuser a fresh node creates


def main() -> int:
    port = int(sys.argv[1])
    setup = "--setup" in sys.argv[2:]
    user = os.environ.get("HOOKBRIDGE_CASSA_USER", "hookbridge")
    password = os.environ.get("HOOKBRIDGE_CASSA_PASSWORD", "hookbridge")
    credentials = SUPERUSER if setup else (user, password)
    cluster = Cluster(
        ["127.0.0.1"],
        port=port,
        auth_provider=PlainTextAuthProvider(*credentials),
        load_balancing_policy=WhiteListRoundRobinPolicy(["127.0.0.1"]),
        protocol_version=5,
        connect_timeout=3,
        control_connection_timeout=3,
    )
    try:
        session = cluster.connect()
        session.execute("SELECT release_version FROM system.local", timeout=5)
        if setup:
            role = '"' + user.replace('"', '""') + '"'  # a quoted identifier
            session.execute(f"CREATE ROLE IF NOT EXISTS {role} WITH LOGIN = true AND PASSWORD = %s", (password,))
    except Exception as exc:  # not up yet, still starting, auth not set up yet: all mean "not ready"
        if "-v" in sys.argv:
            print(exc, file=sys.stderr)
        return 1
    finally:
        cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
