"""Section 5 on transformers' Seq2SeqTrainer (trainer), the presets, checkpoint averaging (Section 6.1), and the
jobs built on them: vaswani-train (recipe) and vaswani-ablate (ablation, Table 3)."""
