"""`vaswani-ablate` from a checkout: modeling_vaswani/toolkit/commands/ablate.py."""

from modeling_vaswani.toolkit.commands.ablate import main

if __name__ == "__main__":
    main()
