"""`vaswani-push` from a checkout: modeling_vaswani/toolkit/commands/push.py."""

from modeling_vaswani.toolkit.commands.push import main

if __name__ == "__main__":
    main()
