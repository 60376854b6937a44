import sys

from benchmarks.peers.run import main

sys.exit(main())
