"""The console commands (`vaswani-train`, `vaswani-translate`, ...): argument parsing and printing over the toolkit's
library functions, one module a command, each with `main(argv=None)`. pyproject.toml names them; nothing imports
this package."""
