"""Records → metrics (pure)."""
