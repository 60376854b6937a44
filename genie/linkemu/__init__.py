"""genie's userspace link emulator: delay, jitter, loss and a delay-line limit per link direction where the
kernel has no sch_netem. See docs/link-emulation.md.

* `genie.linkemu.config`: what one emulator process does (pure data, JSON).
* `genie.linkemu.line`: loss models, stages and the delay line (pure, clock passed in).
* `genie.linkemu.nfqueue`: a single-threaded NFQUEUE client on a raw netlink socket.
* `genie.linkemu.emulator`: the process (``python -m genie.linkemu``), started by the testbed inside a
  namespace.
"""
