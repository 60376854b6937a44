"""The genie-native fabric model: a trace estimated on the topology file itself (any graph genie emulates),
with genie's schedules as max-min fair flows over the links, ECMP as the testbed routes it, and calibration
per link class. See docs/astra.md "The fabric model"."""
