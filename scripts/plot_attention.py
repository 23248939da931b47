"""`vaswani-plot-attention` from a checkout: modeling_vaswani/toolkit/commands/plot_attention.py."""

from modeling_vaswani.toolkit.commands.plot_attention import main

if __name__ == "__main__":
    main()
