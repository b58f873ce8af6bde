"""Recall: how well the consolidated memory helps an agent find what was said (``eval``)."""
