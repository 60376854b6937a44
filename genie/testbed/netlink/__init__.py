"""The pyroute2 layer: the only package of genie that imports pyroute2. :mod:`.backend` makes plan steps real
and changes live links (writes); :mod:`.reading` reads counters, namespaces and routes (never changes anything).

Every netlink socket is opened *inside* a testbed namespace (``IPRoute(netns=..., flags=0)``: never creating a
namespace by accident) — nothing here changes the root namespace. Sysctls are written from a short-lived thread
that has entered the namespace with setns(2) (net sysctls follow the calling thread's namespace).
"""

from genie.testbed.namespaces import namespace_pids
from genie.testbed.netlink.backend import (HOST_STEP_TYPES, HTB_CLASS, HTB_ROOT, HostNetlinkBackend, LEAF_HANDLE,
                                           NetlinkBackend, TC_H_ROOT, add_routes, change_htb_class,
                                           clear_local_root_qdisc, list_genie_namespaces, local_addresses,
                                           probe_netem, remove_namespace, replace_egress_qdiscs, run_in_netns,
                                           set_link_state, write_sysctl)
from genie.testbed.netlink.reading import (FlowRoutes, TcpDiag, inspect_namespace, link_counters)

__all__ = ["namespace_pids", "HOST_STEP_TYPES", "HTB_CLASS", "HTB_ROOT", "HostNetlinkBackend", "LEAF_HANDLE",
           "NetlinkBackend", "TC_H_ROOT", "add_routes", "change_htb_class", "clear_local_root_qdisc",
           "list_genie_namespaces", "local_addresses", "probe_netem", "remove_namespace", "replace_egress_qdiscs",
           "run_in_netns", "set_link_state", "write_sysctl", "FlowRoutes", "TcpDiag", "inspect_namespace", "link_counters"]
