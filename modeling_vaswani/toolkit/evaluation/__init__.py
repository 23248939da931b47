"""Translating many sentences with a loaded model, BLEU as the paper and WMT report it, and plots."""
