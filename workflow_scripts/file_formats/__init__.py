"""Files one stage writes and a later stage reads: their layout, their checks, and how to open them.

Below the stages so that a reader (training reads priors, the report reads priors and routes)
never imports the stage that wrote the file.
"""
