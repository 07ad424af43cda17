"""Evaluation stage: benchmark items, prompts, generation backends, extraction, grading, avg@5."""
