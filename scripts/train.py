"""`vaswani-train` from a checkout: modeling_vaswani/toolkit/commands/train.py."""

from modeling_vaswani.toolkit.commands.train import main

if __name__ == "__main__":
    main()
