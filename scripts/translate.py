"""`vaswani-translate` from a checkout: modeling_vaswani/toolkit/commands/translate.py."""

from modeling_vaswani.toolkit.commands.translate import main

if __name__ == "__main__":
    main()
