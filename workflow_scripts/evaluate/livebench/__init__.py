"""LiveBench grading (math, reasoning, coding), re-implementing LiveBench's own scorers.

``scoring.score`` grades one response against one raw hub row by the rule LiveBench applies to
its task (``livebench/gen_ground_truth_judgment.py``: the scorer is chosen by ``subtask`` else
``task``; ``<think>`` blocks are removed first), ``scoring.score_many`` grades a batch with the
coding programs run in parallel in the sandbox, and ``scoring.category_score`` averages per-task
means as LiveBench's leaderboard does. Task rules live in ``math_tasks``, ``reasoning_tasks`` and
``coding_tasks``; ``testcases`` decodes the coding test cases without trusting the pickle.
"""
