"""Judging translations: BLEU as the paper and WMT report it (sacreBLEU, chrF, TER), and plots of training and
attention."""
