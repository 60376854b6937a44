#!/bin/sh
# run inside this directory; ASTRA_SIM = AstraSim_Analytical_Congestion_Unaware or _Aware
${ASTRA_SIM} --workload-configuration=workload/w --system-configuration=system.json --network-configuration=network.yml --remote-memory-configuration=remote_memory.json --num-queues-per-dim=1 --comm-group-configuration=workload/w.comm_group.json
