"""Helpers shared by the test modules, imported as `helpers.<module>` (pytest puts tests/ on the path)."""
