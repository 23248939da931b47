"""`vaswani-evaluate` from a checkout: modeling_vaswani/toolkit/commands/evaluate.py."""

from modeling_vaswani.toolkit.commands.evaluate import main

if __name__ == "__main__":
    main()
