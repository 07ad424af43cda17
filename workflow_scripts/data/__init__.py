"""Corpus construction (Appendix F.2): read a raw source, score every row, select train and probe splits."""
