"""A stand-in for ssh that hydra's `-launcher-exec` runs in the MPI tests: "reach" a host by entering the
testbed namespace that plays it (address -> namespace from $GENIE_TEST_SSH_MAP, JSON), so the real-host
launch path (hostfile, remote proxies, traffic addresses) runs on one machine, all inside testbed namespaces.
Hydra calls ``ssh -x HOST "PROXY" ARGS...`` (quoted for a remote shell): the quotes are stripped, no shell
runs. An address missing from the map fails like an unreachable host."""

import json
import os
import sys


def main() -> int:
    args = sys.argv[1:]
    while args and args[0].startswith("-"):
        args = args[1:]
    host, command = args[0], [a[1:-1] if len(a) >= 2 and a[0] == a[-1] == '"' else a for a in args[1:]]
    netns = json.loads(os.environ.get("GENIE_TEST_SSH_MAP", "{}")).get(host)
    if netns is None:
        sys.stderr.write(f"ssh: connect to host {host} port 22: No route to host\n")
        return 255
    os.execvp("ip", ["ip", "netns", "exec", netns, *command])
    return 255


if __name__ == "__main__":
    sys.exit(main())
