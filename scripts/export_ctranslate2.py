"""`vaswani-export-ctranslate2` from a checkout: modeling_vaswani/toolkit/commands/export_ctranslate2.py."""

from modeling_vaswani.toolkit.commands.export_ctranslate2 import main

if __name__ == "__main__":
    main()
