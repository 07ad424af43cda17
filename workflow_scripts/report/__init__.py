"""Report stage: every paper table and figure from tidy result frames, with the paper's values beside."""
