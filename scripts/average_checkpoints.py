"""`vaswani-average` from a checkout: modeling_vaswani/toolkit/commands/average.py."""

from modeling_vaswani.toolkit.commands.average import main

if __name__ == "__main__":
    main()
