"""`vaswani-convert` from a checkout: modeling_vaswani/toolkit/commands/convert.py."""

from modeling_vaswani.toolkit.commands.convert import main

if __name__ == "__main__":
    main()
