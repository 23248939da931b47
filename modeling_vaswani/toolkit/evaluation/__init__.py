"""Judging translations: BLEU as the paper and WMT report it, chrF and TER (`metrics`, through the offline `evaluate`
module in `bleu`), and plots of training and attention (`plotting`)."""
