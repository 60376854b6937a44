"""Live fault injection during bench and replay: degrade, flap or take down a link, slow a rank, add
cross-traffic (docs/faults.md)."""
