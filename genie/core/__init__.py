"""Pure data of genie: frozen dataclasses and enums. Imports nothing of genie and nothing outside the stdlib."""
