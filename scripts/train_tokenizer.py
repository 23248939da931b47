"""`vaswani-train-tokenizer` from a checkout: modeling_vaswani/toolkit/commands/train_tokenizer.py."""

from modeling_vaswani.toolkit.commands.train_tokenizer import main

if __name__ == "__main__":
    main()
