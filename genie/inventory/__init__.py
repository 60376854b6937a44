"""Host inventories: the real machines a run places ranks on (YAML <-> Inventory, hostfiles, TestbedInfo).

See docs/inventory.md for the file format. Pure: imports core and topology (for the name rules) only.
"""

from genie.inventory.model import DEFAULT_INVENTORY_NAME, HostfileFormat, Inventory, InventoryHost
from genie.inventory.placement import inventory_to_testbed_info, traffic_address
from genie.inventory.reader import load_inventory, load_inventory_file
from genie.inventory.validation import validate_inventory
from genie.inventory.writer import dump_inventory, hostfile, ssh_config

__all__ = [
    "DEFAULT_INVENTORY_NAME",
    "HostfileFormat",
    "Inventory",
    "InventoryHost",
    "dump_inventory",
    "hostfile",
    "inventory_to_testbed_info",
    "load_inventory",
    "load_inventory_file",
    "ssh_config",
    "traffic_address",
    "validate_inventory",
]
