"""Sharing a checkpoint on the Hugging Face Hub: its model card and the push."""
