"""Run directories, CSV/JSON writers, tables, plots."""
