"""Small helpers shared by every subpackage (no torch at import time)."""
